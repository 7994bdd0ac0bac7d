/* The float32 recurrent cells (cpu_rnn_vec.h) for the baseline x86-64 (SSE2)
 * or any other CPU: what the compiler makes of the loops without a target. */
#define DP_RNN_TABLE dp_cpu_rnn_base
#include "backends/cpu/cpu_rnn_cell_t.h"
