/* The CSV reader (see image_csv.h). The file is read whole and parsed in
 * one pass; field text is copied, unescaped, into one arena (never longer
 * than the file plus a terminator per field), so a 100k-row list costs two
 * allocations plus the cell pointer array. */
#include "data/image_csv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/regular_file.h"

typedef struct {
  const char *path;
  const char *buf;
  size_t n, pos;
  int64_t line;
  char *out; /* arena write position */
  char **fields;
  size_t nfields, cap;
} parser;

static void push_field(parser *p, char *f) {
  if (p->nfields == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 64;
    p->fields = dp_xrealloc(p->fields, p->cap * sizeof *p->fields);
  }
  p->fields[p->nfields++] = f;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }
static bool at_end_of_field(const parser *p) {
  return p->pos >= p->n || p->buf[p->pos] == ',' || p->buf[p->pos] == '\n' || p->buf[p->pos] == '\r';
}

/* Parses one field at p->pos into the arena; sets *quoted. */
static int parse_field(parser *p, bool *quoted) {
  char *start = p->out;
  while (p->pos < p->n && is_blank(p->buf[p->pos])) p->pos++;
  *quoted = p->pos < p->n && p->buf[p->pos] == '"';
  if (*quoted) {
    int64_t open_line = p->line;
    p->pos++;
    for (;;) {
      if (p->pos >= p->n)
        return dp_error("CSV file '%s': line %lld: quoted field opened here is never closed", p->path,
                        (long long)open_line);
      char c = p->buf[p->pos];
      if (c == '"') {
        if (p->pos + 1 < p->n && p->buf[p->pos + 1] == '"') {
          *p->out++ = '"';
          p->pos += 2;
          continue;
        }
        p->pos++;
        break;
      }
      if (c == '\n') p->line++;
      *p->out++ = c;
      p->pos++;
    }
    while (p->pos < p->n && is_blank(p->buf[p->pos])) p->pos++;
    if (!at_end_of_field(p))
      return dp_error("CSV file '%s': line %lld: unexpected '%c' after a closing quote (expected a comma or the end "
                      "of the line)",
                      p->path, (long long)p->line, p->buf[p->pos]);
  } else {
    while (!at_end_of_field(p)) *p->out++ = p->buf[p->pos++];
    while (p->out > start && is_blank(p->out[-1])) p->out--;
  }
  *p->out++ = 0;
  push_field(p, start);
  return 0;
}

static int parse(parser *p, dp_image_csv *c) {
  size_t rows_cap = 0;
  while (p->pos < p->n) {
    int64_t line = p->line;
    size_t first = p->nfields;
    bool quoted = false, any_quoted = false;
    for (;;) {
      if (parse_field(p, &quoted)) return -1;
      any_quoted |= quoted;
      if (p->pos < p->n && p->buf[p->pos] == ',') {
        p->pos++;
        continue;
      }
      break; /* end of line or of the file */
    }
    if (p->pos < p->n && p->buf[p->pos] == '\r') p->pos++;
    if (p->pos < p->n && p->buf[p->pos] == '\n') p->pos++;
    p->line++;
    size_t nf = p->nfields - first;
    if (nf == 1 && !any_quoted && p->fields[first][0] == 0) { /* blank line */
      p->nfields = first;
      continue;
    }
    if (!c->header) {
      c->ncols = (int)nf;
      c->header = dp_xmalloc(nf * sizeof *c->header);
      for (size_t i = 0; i < nf; i++) {
        c->header[i] = p->fields[first + i];
        for (size_t j = 0; j < i; j++)
          if (strcmp(c->header[i], c->header[j]) == 0)
            return dp_error("CSV file '%s': line %lld: the header names column '%s' twice", p->path, (long long)line,
                            c->header[i]);
      }
      p->nfields = first;
      continue;
    }
    if (nf != (size_t)c->ncols)
      return dp_error("CSV file '%s': row %lld (line %lld) has %zu field%s but the header has %d", p->path,
                      (long long)c->nrows + 1, (long long)line, nf, nf == 1 ? "" : "s", c->ncols);
    if ((size_t)c->nrows == rows_cap) {
      rows_cap = rows_cap ? 2 * rows_cap : 256;
      c->lines = dp_xrealloc(c->lines, rows_cap * sizeof *c->lines);
    }
    c->lines[c->nrows++] = line;
  }
  if (!c->header) return dp_error("CSV file '%s': empty (expected a header row naming the columns)", p->path);
  c->cells = p->fields;
  p->fields = NULL;
  return 0;
}

int dp_image_csv_read(const char *path, dp_image_csv *c) {
  memset(c, 0, sizeof *c);
  FILE *f = dp_fopen_regular(path, NULL);
  if (!f) {
    char why[256];
    snprintf(why, sizeof why, "%s", dp_errmsg());
    return dp_error("CSV file '%s': %s", path, why);
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 65536) {
      cap = cap ? 2 * cap : 65536;
      buf = dp_xrealloc(buf, cap);
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  bool failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    return dp_error("CSV file '%s': read error", path);
  }
  /* a NUL byte would end a field's C string early: an image path cut at it opens another file */
  const char *nul = memchr(buf, 0, n);
  if (nul) {
    long long line = 1;
    for (const char *q = buf; q < nul; q++) line += *q == '\n';
    free(buf);
    return dp_error("CSV file '%s': line %lld holds a NUL byte (expected text)", path, line);
  }
  parser p = {.path = path, .buf = buf, .n = n, .line = 1};
  if (n >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) p.pos = 3;
  /* every field is at most its source text plus a terminator, and there are
   * at most n + 1 fields */
  c->text = dp_xmalloc(2 * n + 2);
  p.out = c->text;
  int rc = parse(&p, c);
  free(buf);
  free(p.fields);
  if (rc) dp_image_csv_free(c);
  return rc;
}

int dp_image_csv_column(const dp_image_csv *c, const char *name) {
  for (int i = 0; i < c->ncols; i++)
    if (strcmp(c->header[i], name) == 0) return i;
  return -1;
}

void dp_image_csv_free(dp_image_csv *c) {
  free(c->header);
  free(c->cells);
  free(c->lines);
  free(c->text);
  memset(c, 0, sizeof *c);
}
