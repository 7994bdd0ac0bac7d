/* The float32 recurrent cell kernels per instruction set (cpu_rnn_cell_t.h
 * compiled for AVX-512, AVX2 and the baseline): cpu_rnn.c runs the set
 * matching the float32 kernels in use (cpu_vec.h's dp_cpu_vec_get, so
 * DDPLUA_CPU_ISA and core.set_cpu_kernels choose these too); float64 stays
 * on cpu_rnn.c's scalar reference. Contracts: dp_rnn_cell_args in
 * backends/backend.h. */
#ifndef DP_CPU_RNN_VEC_H
#define DP_CPU_RNN_VEC_H

#include "backends/backend.h"

typedef struct {
  void (*forward)(const dp_rnn_cell_args *a);
  void (*backward)(const dp_rnn_cell_args *a);
} dp_cpu_rnn_kernels;

extern const dp_cpu_rnn_kernels dp_cpu_rnn_avx512, dp_cpu_rnn_avx2, dp_cpu_rnn_base;

#endif
