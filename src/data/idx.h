/* IDX files (the MNIST / Fashion-MNIST format), plain or gzip'd. */
#ifndef DP_IDX_H
#define DP_IDX_H

#include "tensor/tensor.h"

/* Reads an IDX file of unsigned bytes (type 0x08) into a uint8 CPU tensor
 * shaped as the header says. The file may be gzip'd or plain (zlib reads
 * both). NULL + dp_error naming the path and what was wrong (cannot open,
 * bad magic, unsupported type, truncated, corrupt gzip, trailing bytes). */
dp_tensor *dp_idx_load(const char *path);

#endif
