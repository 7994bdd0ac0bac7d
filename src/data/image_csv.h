/* A small CSV reader for image lists (RFC 4180): comma-separated fields,
 * a header row naming the columns, quoted fields with "" for a quote and
 * with commas or newlines inside, LF or CRLF line ends, an optional UTF-8
 * byte-order mark. Spaces around unquoted fields are trimmed (so a header
 * "path, label" names the column "label"); blank lines are skipped. Every
 * data row must have as many fields as the header. Errors name the file and
 * the line. The file must be a regular file (a FIFO would block the reader). */
#ifndef DP_IMAGE_CSV_H
#define DP_IMAGE_CSV_H

#include <stdint.h>

typedef struct {
  int ncols;
  char **header;  /* ncols column names */
  int64_t nrows;  /* data rows (the header excluded) */
  char **cells;   /* nrows * ncols, row-major; point into `text` */
  int64_t *lines; /* the 1-based file line each data row starts on */
  char *text;     /* storage for the fields */
} dp_image_csv;

int dp_image_csv_read(const char *path, dp_image_csv *out);
/* Column position of `name`, or -1. */
int dp_image_csv_column(const dp_image_csv *c, const char *name);
void dp_image_csv_free(dp_image_csv *c);

#endif
