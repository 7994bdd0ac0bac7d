/* The float32 recurrent cells (cpu_rnn_vec.h) for AVX2 with FMA: 8 lanes.
 * Run only when cpu_vec.h's AVX2 set is (the CPU has it). */
#pragma GCC target("avx2,fma,bmi,bmi2")

#define DP_RNN_TABLE dp_cpu_rnn_avx2
#include "backends/cpu/cpu_rnn_cell_t.h"
