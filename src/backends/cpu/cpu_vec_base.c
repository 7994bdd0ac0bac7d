/* The float32 kernels of cpu_vec.h for the build's baseline (SSE2 on x86-64, 4 float32 lanes; any other CPU).
 * The whole translation unit is compiled for that target; cpu_vec.c only
 * hands this table out after the CPU said it has the features. */
/* the build's baseline (SSE2 on x86-64): no target */

#define DP_VEC_TABLE dp_cpu_vec_base
#define DP_VEC_NAME "base"
#define DP_VEC_WIDTH 4
/* in this order: each part uses the ones before it */
// clang-format off
#include "backends/cpu/cpu_vec_ew_t.h"
#include "backends/cpu/cpu_vec_rows_t.h"
#include "backends/cpu/cpu_vec_nn_t.h"
#include "backends/cpu/cpu_vec_pool2x2_t.h"
#include "backends/cpu/cpu_vec_table_t.h"
// clang-format on
