/* Batch gathering: rows of a dataset tensor picked by position, cast and
 * scaled in the same pass (uint8 images become float32 in [0, 1] here, so
 * datasets keep their compact form in memory). */
#ifndef DP_GATHER_H
#define DP_GATHER_H

#include "tensor/tensor.h"

/* out[i] = src[idx[i] - base] / divisor (rows along dim 0), as dtype dt;
 * divisor 1 copies values exactly, 255 maps bytes to [0, 1] as
 * torchvision's ToTensor does (a division, for the same float32 values). src on the CPU is read in place (any
 * layout; contiguous is fastest); on a device the rows are picked by the
 * backend's index_select and cast afterwards. An index out of range is an
 * error naming it and its batch position (1-based when base is 1). */
dp_tensor *dp_gather_rows(dp_tensor *src, const int64_t *idx, int64_t n, int64_t base, dp_dtype dt, double divisor);

#endif
