/* Flat binary token files (nanoGPT's train.bin: the token ids one after
 * the other as little-endian uint16, or uint8), read through a read-only
 * memory map, so a file of any size costs no memory until windows of it are
 * read. Windows come out as int64 ids shifted by one (file id t is t + 1:
 * ddplua's ids are 1-based, as nn.Embedding's), with the targets y the
 * same window one token later. */
#ifndef DP_TOKEN_FILE_H
#define DP_TOKEN_FILE_H

#include <stdint.h>

typedef struct dp_token_file dp_token_file;

/* Maps path; elsize 1 (uint8) or 2 (uint16). NULL + dp_error when the file
 * cannot be read, is empty or is not a whole number of elements. */
dp_token_file *dp_token_file_open(const char *path, int elsize);
void dp_token_file_close(dp_token_file *f);
int64_t dp_token_file_len(const dp_token_file *f); /* tokens */

/* For each of n 0-based starts: x[i, t] = tok[start + t] + 1 and (y non-NULL)
 * y[i, t] = tok[start + t + 1] + 1, t < block; x and y are n * block. A
 * start whose window (and target) does not fit is an error naming it
 * (1-based, as the caller's positions). */
int dp_token_file_windows(const dp_token_file *f, const int64_t *starts, int64_t n, int64_t block, int64_t *x,
                          int64_t *y);

/* n starts uniform in [0, range) from Philox (seed, counter offset + i),
 * i < n: the same numbers for the same generator state on every machine. */
void dp_token_file_random_starts(int64_t range, uint64_t seed, uint64_t offset, int64_t n, int64_t *starts);

/* Writes n ids (1-based, as windows return them) as a token file of elsize
 * bytes per token (id - 1 stored), atomically (temporary file, fsync,
 * rename). An id out of range for elsize is an error naming its position. */
int dp_token_file_write(const char *path, const int64_t *ids, int64_t n, int elsize);

#endif
