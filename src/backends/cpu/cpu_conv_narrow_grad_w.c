/* The weight (and bias) gradient of a dense stride-1 convolution of one
 * input channel and at most NARROW_MAX_K taps: a grayscale network's first
 * layer (the Fashion-MNIST CNN's 1 -> 32 3x3, LeNet's 1 -> 6 5x5), float32
 * on AVX-512:
 *
 *   gw[o, 0, i, j] = sum over n, oy, ox of gy[n, o, oy, ox] * x[n, 0, oy - ph + i dh, ox - pw + j dw]
 *   gb[o]          = sum over n, oy, ox of gy[n, o, oy, ox]
 *
 * oneDNN declines these (one channel) and the GEMM path they took (im2col,
 * then per image gy [O, L] times cols^T [L, K]) has an output of O x 9 and
 * a depth of L = 784: a tile kernel made for wide outputs, plus another
 * pass over gy for the bias. Here each image's input plane is copied once
 * into a zero-bordered block (row pitch wp = OW + (kw - 1) dw, so a tap is
 * the block shifted by i dh wp + j dw and the padding reads zeros), and a
 * register block of two output channels by up to nine taps walks the
 * output rows: per 16 positions two gy loads and nine shifted x loads feed
 * eighteen FMAs, and the bias is two more adds of the loaded gy. gy is
 * read once from memory, the next block's planes prefetched (planes of a
 * few KB are streams too short for the hardware prefetchers: without the
 * hint the kernel waited on the gy loads, 0.97 ms against 0.45 for the CNN's
 * layer); x's block stays in L1. Lanes past OW are masked on both operands
 * (never 0 * Inf). Each (o, k) sums an image in float lanes, then adds the
 * lanes into a double; images are split between threads, each with its own
 * double sums, added in thread order after.
 *
 * Measured (bench/conv_narrow_grad_w.lua, one Zen 5 core, forward + the
 * weight and bias gradients, ms): the CNN's layer 1.31 against 1.98, LeNet's
 * 0.57 against 1.13. With three channels (CIFAR stems, 27 taps, oneDNN's
 * kernel before) it measured even or slower (3.75 / 3.88 at 3 -> 16 on
 * [128, 3, 32, 32], 7.27 / 6.80 with the input gradient), so those stay
 * with oneDNN. Declined (false from _takes) elsewhere: the caller keeps the
 * other paths. tests/spec/conv_narrow_grad_w_spec.lua holds it to float64. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "backends/cpu/sgemm.h"
#include "core/error.h"

/* Taps a convolution may have to be taken here (a 5x5 kernel: the register
 * block holds nine taps, more taps are more passes over gy) */
enum { NARROW_MAX_K = 27, NARROW_TAPS = 9, NARROW_MAX_THREADS = 64 };
/* an image's padded input planes past this are left to the other paths */
#define NARROW_SCRATCH_MAX ((int64_t)4 << 20)

typedef struct {
  const float *gy, *x;
  const dp_window2d *g;
  int64_t o, k, wp, hp, parts;
  double *sums; /* parts x (o * k + o): each part's gw then gb sums */
  bool bias, failed;
} narrow_call;

/* on unless DDPLUA_CONV_NARROW_GRAD=0 or set off (the GEMM path then, as before: for measuring one against the
 * other, and for the specs); the calls that ran here so far */
static int narrow_on = -1; /* -1: not yet read from the environment (atomic) */
static long narrow_calls;  /* atomic */

bool dp_cpu_set_conv_narrow_grad(bool on) {
  bool was = dp_cpu_conv_narrow_grad_enabled();
  __atomic_store_n(&narrow_on, on ? 1 : 0, __ATOMIC_RELAXED);
  return was;
}
bool dp_cpu_conv_narrow_grad_enabled(void) {
  int on = __atomic_load_n(&narrow_on, __ATOMIC_RELAXED);
  if (on < 0) {
    const char *e = getenv("DDPLUA_CONV_NARROW_GRAD");
    on = !(e && strcmp(e, "0") == 0);
    __atomic_store_n(&narrow_on, on, __ATOMIC_RELAXED);
  }
  return on;
}
long dp_cpu_conv_narrow_grad_calls(void) { return __atomic_load_n(&narrow_calls, __ATOMIC_RELAXED); }

bool dp_cpu_conv2d_narrow_grad_w_takes(const dp_window2d *g, const dp_tensor *gy) {
  if (!dp_cpu_conv_narrow_grad_enabled() || dp_cpu_vec_get()->width != 16 || gy->dtype != DP_F32 || gy->ndim != 4 ||
      g->n < 1 || g->groups > 1 || g->sh != 1 || g->sw != 1 || g->oh < 1 || g->ow < 1)
    return false;
  int64_t K = g->c * g->kh * g->kw, wp = g->ow + (g->kw - 1) * g->dw, hp = g->oh + (g->kh - 1) * g->dh;
  /* the padded block holds every row and column some tap reads */
  return g->c == 1 && K <= NARROW_MAX_K && g->ph + g->h <= hp && g->pw + g->w <= wp &&
         g->c * hp * wp * (int64_t)sizeof(float) <= NARROW_SCRATCH_MAX;
}

#include <immintrin.h>
#define TARGET_AVX512 __attribute__((target("avx512f,fma")))
#define INLINE_ALWAYS __attribute__((always_inline)) inline

/* R output channels (gy planes gy0, gy0 + plane) by T taps (x block offsets
 * off[0..T)) over one image: sums[r][t] += the products, bsum[r] += gy
 * (when bias). R and T are constants in each instance below. */
TARGET_AVX512 static INLINE_ALWAYS void narrow_block(const float *gy0, int64_t plane, const float *xp,
                                                     const int64_t *off, int64_t oh, int64_t ow, int64_t wp, bool bias,
                                                     double *sums, int64_t k_stride, double *bsum, const int R,
                                                     const int T) {
  __m512 acc[2][NARROW_TAPS], bacc[2];
  _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {
    bacc[r] = _mm512_setzero_ps();
    _Pragma("GCC unroll 9") for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t y = 0; y < oh; y++) {
    const float *gr = gy0 + y * ow, *xr = xp + y * wp;
    /* the next block's gy rows (the next channels, or the next image's first: planes of a few KB are streams too
     * short for the hardware prefetchers, and the loads waited on memory; a hint past gy's end does not fault) */
    _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) for (int64_t q = 0; q < ow; q += 16)
        __builtin_prefetch(gr + (R + r) * plane + q, 0, 3);
    for (int64_t q = 0; q < ow; q += 16) {
      __mmask16 m = (__mmask16)(ow - q >= 16 ? 0xFFFFu : (1u << (ow - q)) - 1u);
      __m512 gv[2];
      _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) gv[r] = _mm512_maskz_loadu_ps(m, gr + r * plane + q);
      if (bias) _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) bacc[r] = _mm512_add_ps(bacc[r], gv[r]);
      _Pragma("GCC unroll 9") for (int t = 0; t < T; t++) {
        __m512 xv = _mm512_maskz_loadu_ps(m, xr + off[t] + q);
        _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(gv[r], xv, acc[r][t]);
      }
    }
  }
  _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {
    _Pragma("GCC unroll 9") for (int t = 0; t < T; t++) sums[r * k_stride + t] +=
        (double)_mm512_reduce_add_ps(acc[r][t]);
    if (bias) bsum[r] += (double)_mm512_reduce_add_ps(bacc[r]);
  }
}

typedef void (*narrow_fn)(const float *, int64_t, const float *, const int64_t *, int64_t, int64_t, int64_t, bool,
                          double *, int64_t, double *);
#define NARROW_INSTANCE(R, T)                                                                                          \
  TARGET_AVX512 static void narrow_##R##_##T(const float *gy0, int64_t plane, const float *xp, const int64_t *off,     \
                                             int64_t oh, int64_t ow, int64_t wp, bool bias, double *sums, int64_t ks,  \
                                             double *bsum) {                                                           \
    narrow_block(gy0, plane, xp, off, oh, ow, wp, bias, sums, ks, bsum, R, T);                                         \
  }
#define NARROW_INSTANCES(R)                                                                                            \
  NARROW_INSTANCE(R, 1)                                                                                                \
  NARROW_INSTANCE(R, 2)                                                                                                \
  NARROW_INSTANCE(R, 3)                                                                                                \
  NARROW_INSTANCE(R, 4)                                                                                                \
  NARROW_INSTANCE(R, 5)                                                                                                \
  NARROW_INSTANCE(R, 6)                                                                                                \
  NARROW_INSTANCE(R, 7)                                                                                                \
  NARROW_INSTANCE(R, 8)                                                                                                \
  NARROW_INSTANCE(R, 9)
NARROW_INSTANCES(1)
NARROW_INSTANCES(2)
/* [R - 1][T - 1] */
static const narrow_fn narrow_fns[2][NARROW_TAPS] = {
    {narrow_1_1, narrow_1_2, narrow_1_3, narrow_1_4, narrow_1_5, narrow_1_6, narrow_1_7, narrow_1_8, narrow_1_9},
    {narrow_2_1, narrow_2_2, narrow_2_3, narrow_2_4, narrow_2_5, narrow_2_6, narrow_2_7, narrow_2_8, narrow_2_9},
};

/* part p: images [p N / parts, (p + 1) N / parts) into its own sums */
static void narrow_parts(void *ctx, int64_t lo, int64_t hi) {
  narrow_call *k = ctx;
  const dp_window2d *g = k->g;
  const int64_t C = g->c, H = g->h, W = g->w, OH = g->oh, OW = g->ow, O = k->o, K = k->k, wp = k->wp;
  const size_t xsz = (size_t)(k->hp * wp);
  float *xp = calloc((size_t)C * xsz, sizeof(float)); /* borders stay 0: only the interiors are rewritten */
  if (!xp) {
    __atomic_store_n(&k->failed, true, __ATOMIC_RELAXED);
    return;
  }
  int64_t off[NARROW_MAX_K];
  for (int64_t c = 0; c < C; c++)
    for (int64_t i = 0; i < g->kh; i++)
      for (int64_t j = 0; j < g->kw; j++)
        off[(c * g->kh + i) * g->kw + j] = c * (int64_t)xsz + i * g->dh * wp + j * g->dw;
  for (int64_t p = lo; p < hi; p++) {
    double *sums = k->sums + p * (O * K + O), *bsum = sums + O * K;
    memset(sums, 0, sizeof(double) * (size_t)(O * K + O));
    for (int64_t n = p * g->n / k->parts; n < (p + 1) * g->n / k->parts; n++) {
      for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < H; r++)
          memcpy(xp + (size_t)c * xsz + (size_t)((r + g->ph) * wp + g->pw), k->x + ((n * C + c) * H + r) * W,
                 sizeof(float) * (size_t)W);
      const float *gyn = k->gy + n * O * OH * OW;
      for (int64_t o = 0; o < O; o += 2) {
        int R = O - o >= 2 ? 2 : 1;
        for (int64_t t0 = 0; t0 < K; t0 += NARROW_TAPS) {
          int T = (int)(K - t0 < NARROW_TAPS ? K - t0 : NARROW_TAPS);
          narrow_fns[R - 1][T - 1](gyn + o * OH * OW, OH * OW, xp, off + t0, OH, OW, wp, k->bias && t0 == 0,
                                   sums + o * K + t0, K, bsum + o);
        }
      }
    }
  }
  free(xp);
}

int dp_cpu_conv2d_narrow_grad_w(dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                                const dp_window2d *g) {
  DP_ASSERT(dp_cpu_conv2d_narrow_grad_w_takes(g, gy) && x->dtype == DP_F32 && gw->dtype == DP_F32);
  int64_t O = gy->shape[1], K = g->c * g->kh * g->kw;
  DP_ASSERT(dp_numel(gw) == O * K && (!gb || (gb->dtype == DP_F32 && dp_numel(gb) == O)));
  int threads = dp_sgemm_get_num_threads();
  int64_t parts = g->n < threads ? g->n : threads;
  if (parts > NARROW_MAX_THREADS) parts = NARROW_MAX_THREADS;
  if (parts < 1) parts = 1;
  /* one image of the smallest layer taken is ~0.01 ms: split only batches worth a thread */
  if (g->n * O * K * g->oh * g->ow < ((int64_t)1 << 20)) parts = 1;
  narrow_call k = {.gy = dp_data(gy),
                   .x = dp_data(x),
                   .g = g,
                   .o = O,
                   .k = K,
                   .wp = g->ow + (g->kw - 1) * g->dw,
                   .hp = g->oh + (g->kh - 1) * g->dh,
                   .parts = parts,
                   .bias = gb != NULL};
  k.sums = malloc(sizeof(double) * (size_t)(parts * (O * K + O)));
  if (!k.sums) return dp_error("conv2d: out of memory for the weight gradient's sums (%lld parts)", (long long)parts);
  dp_cpu_parallel_for(parts, 1, 1, narrow_parts, &k);
  if (k.failed) {
    free(k.sums);
    return dp_error("conv2d: out of memory for the weight gradient's padded planes");
  }
  float *w = dp_data(gw), *b = gb ? dp_data(gb) : NULL;
  for (int64_t i = 0; i < O * K + O; i++) {
    if (i >= O * K && !b) break;
    double s = 0;
    for (int64_t p = 0; p < parts; p++) s += k.sums[p * (O * K + O) + i];
    if (i < O * K) w[i] = (float)s;
    else b[i - O * K] = (float)s;
  }
  free(k.sums);
  __atomic_fetch_add(&narrow_calls, 1, __ATOMIC_RELAXED);
  return 0;
}
