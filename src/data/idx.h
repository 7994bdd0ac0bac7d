/* IDX files (the MNIST / Fashion-MNIST format), plain or gzip'd. */
#ifndef DP_IDX_H
#define DP_IDX_H

#include "tensor/tensor.h"

/* Reads an IDX file of unsigned bytes (type 0x08) into a uint8 CPU tensor
 * shaped as the header says. The file may be gzip'd or plain (zlib reads
 * both). NULL + dp_error naming the path and what was wrong (cannot open,
 * bad magic, unsupported type, truncated, corrupt gzip, trailing bytes). */
dp_tensor *dp_idx_load(const char *path);
/* dp_idx_load for a gzip'd file (path ending in .gz) through a cache of the
 * plain file in cache_dir (created as needed), keyed by the source's path,
 * size and mtime. A cache file that fails to load is replaced; one that
 * cannot be written is skipped. NULL or "" cache_dir: no cache. */
dp_tensor *dp_idx_load_cached(const char *path, const char *cache_dir);

#endif
