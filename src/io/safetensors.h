/* The safetensors format (Hugging Face), read and written without a
 * dependency:
 *
 *   [8 bytes: N, little-endian u64][N bytes: JSON header][byte buffer]
 *
 * The header maps each tensor name to {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]} (offsets into the byte buffer) and may hold
 * "__metadata__": {string: string}. ddplua writes the header padded with
 * spaces to a multiple of 8 bytes, the metadata first, the tensors in the
 * order given; the data of the bigger element types first (a stable order),
 * so every tensor's bytes are aligned to its element size for readers that
 * map the file. Element data is little-endian, C-contiguous.
 *
 * Reading validates everything a corrupt or hostile file could get wrong
 * (header size against file size, JSON syntax, field types, dtype names,
 * offsets that overlap, leave holes or run past the buffer, byte counts that
 * do not match dtype x shape) and names the file and the byte offset.
 *
 * Reading copies the data into fresh memory, unless the caller asks for a
 * mapping (use_mmap; ddp.load's {mmap = true}): then the file is mapped
 * (MAP_PRIVATE) and CPU tensors alias the mapping where their bytes are
 * aligned to their element size (all of them in files ddplua and Hugging
 * Face write): no copy, and the page cache is the only copy until a tensor
 * is written to (copy-on-write). The mapping lives until the last such
 * tensor is released. A mapped file must not be truncated in place while
 * its tensors live (a read past the new end is SIGBUS; ddplua itself only
 * ever replaces files by rename), which is why mapping is not the default.
 *
 * Writing goes to "<path>.tmp.<pid>", is fsync'ed, renamed over path and the
 * directory fsync'ed, so a crash at any moment leaves either the old file or
 * the new one at path, never a truncated one. */
#ifndef DP_SAFETENSORS_H
#define DP_SAFETENSORS_H

#include <stddef.h>

#include "tensor/tensor.h"

/* Headers bigger than this are refused (as by the reference implementation)
 * so that a corrupt size field cannot make a reader allocate gigabytes. */
#define DP_ST_MAX_HEADER ((size_t)100000000)

typedef struct {
  char *name; /* NUL-terminated; names with embedded NULs are refused */
  dp_tensor *t;
} dp_st_tensor;

typedef struct {
  char *key, *value;
  size_t value_len;
} dp_st_meta;

/* What a file holds: tensors in header order, metadata in header order. */
typedef struct {
  size_t n;
  dp_st_tensor *tensors;
  size_t nmeta;
  dp_st_meta *meta;
} dp_st_contents;

/* Writes ts (any device, dtype, strides: copied to contiguous CPU memory one
 * tensor at a time) and meta to path atomically. Names must be unique, not
 * empty and not "__metadata__". Returns 0, or -1 after dp_error naming the
 * file (and tensor). The caller keeps ownership of everything passed. */
int dp_safetensors_save(const char *path, const dp_st_tensor *ts, size_t n, const dp_st_meta *meta, size_t nmeta);

/* Reads path into *out with tensors on dev (CUDA: staged through host
 * memory one tensor at a time), mapping the file when use_mmap (see above).
 * Returns 0, or -1 after dp_error. */
int dp_safetensors_load(const char *path, dp_device dev, int use_mmap, dp_st_contents *out);
void dp_st_contents_free(dp_st_contents *c);

/* "F32" <-> DP_F32, ... Returns NULL / -1 for a dtype outside F32, F64,
 * I64, U8, BF16, F16. */
const char *dp_st_dtype_name(dp_dtype t);
int dp_st_dtype_parse(const char *s, dp_dtype *out);

#endif
