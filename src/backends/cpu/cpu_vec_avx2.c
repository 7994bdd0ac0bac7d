/* The float32 kernels of cpu_vec.h for AVX2 with FMA: 8 float32 lanes.
 * The whole translation unit is compiled for that target; cpu_vec.c only
 * hands this table out after the CPU said it has the features. */
#pragma GCC target("avx2,fma,bmi,bmi2,lzcnt,popcnt,f16c")

#define DP_VEC_TABLE dp_cpu_vec_avx2
#define DP_VEC_NAME "avx2"
#define DP_VEC_WIDTH 8
/* in this order: each part uses the ones before it */
// clang-format off
#include "backends/cpu/cpu_vec_ew_t.h"
#include "backends/cpu/cpu_vec_rows_t.h"
#include "backends/cpu/cpu_vec_nn_t.h"
#include "backends/cpu/cpu_vec_pool2x2_t.h"
#include "backends/cpu/cpu_vec_table_t.h"
// clang-format on
