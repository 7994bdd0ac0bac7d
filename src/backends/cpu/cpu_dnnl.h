/* oneDNN (Debian's libdnnl, the library PyTorch's CPU convolutions use)
 * for the CPU kernels where it measures faster than ddplua's own: float32
 * conv2d forward and both backwards (direct or Winograd convolutions in
 * blocked layouts, against im2col + GEMM), and bfloat16 matmuls on CPUs that
 * compute bfloat16 natively (AMX, AVX512-BF16). The decisions and their
 * measurements are in docs/performance.md.
 *
 * Optional: built when CMake finds oneapi/dnnl/dnnl.h and libdnnl
 * (DDPLUA_DNNL=OFF builds without); without it every entry declines and
 * the callers take their own path. DDPLUA_DNNL=0 in the environment, or
 * dp_dnnl_set_enabled(false), declines at run time too.
 *
 * Each entry returns 1 when it computed the result, 0 when it declines
 * (not built, disabled, a dtype or shape it leaves to ddplua's kernels, or
 * oneDNN has no implementation), -1 after dp_error.
 *
 * Primitives are created once per shape and kept (a bounded cache). oneDNN
 * runs single-threaded on the calling thread (its OpenMP pool is not
 * used); a call splits its batch over the threads of cpu_parallel.h, so
 * one pool serves every kernel and denormals are flushed there as
 * everywhere (cpu_fpu.h). */
#ifndef DP_CPU_DNNL_H
#define DP_CPU_DNNL_H

#include <stdbool.h>

#include "backends/backend.h"

/* "oneDNN 2.6.3 (avx512_core)", or why it is not used */
const char *dp_dnnl_info(void);
bool dp_dnnl_available(void); /* built with it, and enabled */
void dp_dnnl_set_enabled(bool on);
/* calls oneDNN has computed so far (convolutions and GEMMs; specs check
 * that a path ran) */
long dp_dnnl_calls(void);
/* Winograd for the 3x3, stride-1 convolutions of 32+ channels whose
 * scratchpad stays within 64 MiB (cpu_dnnl_conv_prim.c: use_winograd,
 * entry_make), on unless DDPLUA_CONV_WINOGRAD=0 or set off; and the calls
 * that ran Winograd primitives so far */
bool dp_dnnl_winograd_enabled(void);
void dp_dnnl_set_winograd(bool on);
long dp_dnnl_winograd_calls(void);
/* convolution calls (forward, or a backward) computed in bfloat16 so far;
 * autocast computes the shapes bfloat16 does not pay for in float32
 * (dp_dnnl_conv2d_bf16_pays, ops/conv.c), and bfloat16 tensors here are
 * widened to float32 where the CPU has no native bfloat16,
 * DDPLUA_CONV_BF16=0, or oneDNN declines the shape */
long dp_dnnl_bf16_conv_calls(void);

/* y [N, O, oh, ow] = conv(x, w) + b (b may be NULL); contiguous float32,
 * or bfloat16 (in bfloat16 where the CPU has it natively and
 * DDPLUA_CONV_BF16 is not 0, else widened to float32) */
int dp_dnnl_conv2d(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window2d *g);
/* gx (may be NULL) from gy and w; gw (may be NULL) and gb (may be NULL,
 * only with gw) from x and gy; overwritten, not accumulated */
int dp_dnnl_conv2d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_tensor *w, const dp_window2d *g);
/* backend.h's conv3d and conv3d_backward: float32 NCDHW / OIDHW, contiguous */
int dp_dnnl_conv3d(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window3d *g);
int dp_dnnl_conv3d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_tensor *w, const dp_window3d *g);
/* a bfloat16 GEMM (dp_gemm_args, alpha 1, beta 0 or 1) on CPUs with native
 * bfloat16 arithmetic; bias (NULL, or n bfloat16 values) is added to every
 * row in the float32 accumulator, before the one rounding to bfloat16.
 * 1 done, 0 declined (the caller computes it), -1 error */
int dp_dnnl_gemm_bf16(const dp_gemm_args *g, const void *bias);
/* whether this CPU has native bfloat16 arithmetic (AMX-BF16, AVX512-BF16) */
bool dp_cpu_native_bf16(void);
/* backend.h's conv2d_bf16_pays for the CPU: without AMX, bfloat16 for
 * outputs of 4 or more positions; DDPLUA_CONV_BF16=1 every shape, 0 none */
bool dp_dnnl_conv2d_bf16_pays(const dp_window2d *g);

#endif
