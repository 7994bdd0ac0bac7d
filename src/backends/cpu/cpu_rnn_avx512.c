/* The float32 recurrent cells (cpu_rnn_vec.h) for AVX-512 with FMA: 16
 * lanes. Run only when cpu_vec.h's AVX-512 set is (the CPU has it). */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2")

#define DP_RNN_TABLE dp_cpu_rnn_avx512
#include "backends/cpu/cpu_rnn_cell_t.h"
