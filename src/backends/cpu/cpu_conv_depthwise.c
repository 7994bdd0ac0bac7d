/* The weight gradient of a depthwise or grouped convolution (MobileNet's,
 * EfficientNet's 5x5 and ConvNeXt's 7x7 layers; ResNeXt's groups of 4
 * channels) at stride 1, any padding and dilation, float32:
 *
 *   gw[o, ci, i, j] = sum over n, oy, ox of gy[n, o, oy, ox] * x[n, c, oy - ph + i dh, ox - pw + j dw]
 *
 * with c = ci + (o's group) * (channels a group). Each input plane of a
 * group and image is copied once into a zero-bordered block of row pitch
 * Wp = OW + (kw - 1) dw (xp), each gy plane into rows of the same pitch (gp,
 * zeros past OW); a tap's sum over a plane pair is then one dot product of
 * length (OH - 1) Wp + OW between gp and xp shifted by i dh Wp + j dw: the
 * zero columns make the row edges and the padding vanish, so the dot runs
 * whole vectors over contiguous memory, the blocks staying in cache for
 * every tap. Each dot is added into a double per weight; groups are split
 * between threads (a group's gradient is one thread's). A plane of x that
 * holds an Inf or a NaN is summed row by row instead: there gy's zero
 * columns would meet it in pairs no output has, and 0 * Inf is NaN.
 *
 * oneDNN's weight gradients for these ran at a small fraction of its
 * forward's speed (one Zen 5 core, forward / weight gradient, ms): depthwise
 * [32, 96, 28, 28] 5x5 2.5 / 73, 7x7 3.3 / 144, [16, 384, 14, 14] 7x7 1.2 /
 * 61 (PyTorch 1.13: 47, 87, 34), and 32 groups of 4 channels [16, 128, 28,
 * 28] 3x3 4.0 / 21 (its gemm:jit). Here: 5.3-6.7, 9.0-10.5, 5.7-6.6 and
 * 4.8. Depthwise 3x3 (7.2-8.0 ms here against oneDNN's 7.5-8.2 for [32,
 * 64, 56, 56], alternated three times), groups of 16 channels or more and
 * the strided layers stay with oneDNN. The bias gradient, when asked for,
 * is each output channel's sum of gy. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"

/* at most this many taps (a 31 x 31 kernel): the per-tap sums live on the stack */
enum { DW_MAX_TAPS = 1024 };

/* sum of a[i] b[i], i < n, in float lanes (four accumulators a width) */
#define DOT_FN(NAME, ATTR, VEC, W, ZERO, LOADU, FMA, MASKLOAD, REDUCE)                                                 \
  ATTR static float NAME(const float *a, const float *b, int64_t n) {                                                  \
    VEC s0 = ZERO, s1 = ZERO, s2 = ZERO, s3 = ZERO;                                                                    \
    int64_t i = 0;                                                                                                     \
    for (; i + 4 * W <= n; i += 4 * W) {                                                                               \
      s0 = FMA(LOADU(a + i), LOADU(b + i), s0);                                                                        \
      s1 = FMA(LOADU(a + i + W), LOADU(b + i + W), s1);                                                                \
      s2 = FMA(LOADU(a + i + 2 * W), LOADU(b + i + 2 * W), s2);                                                        \
      s3 = FMA(LOADU(a + i + 3 * W), LOADU(b + i + 3 * W), s3);                                                        \
    }                                                                                                                  \
    for (; i + W <= n; i += W) s0 = FMA(LOADU(a + i), LOADU(b + i), s0);                                               \
    if (i < n) s1 = FMA(MASKLOAD(a + i, n - i), MASKLOAD(b + i, n - i), s1);                                           \
    return REDUCE(s0, s1, s2, s3);                                                                                     \
  }

#define TARGET_AVX512 __attribute__((target("avx512f,fma")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))

TARGET_AVX512 static inline __m512 load16_tail(const float *p, int64_t n) {
  return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}
TARGET_AVX512 static inline float reduce16(__m512 a, __m512 b, __m512 c, __m512 d) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}
DOT_FN(dot_avx512, TARGET_AVX512, __m512, 16, _mm512_setzero_ps(), _mm512_loadu_ps, _mm512_fmadd_ps, load16_tail,
       reduce16)

TARGET_AVX2 static inline __m256 load8_tail(const float *p, int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}
TARGET_AVX2 static inline float reduce8(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 s = _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}
DOT_FN(dot_avx2, TARGET_AVX2, __m256, 8, _mm256_setzero_ps(), _mm256_loadu_ps, _mm256_fmadd_ps, load8_tail, reduce8)

/* the baseline: four partial sums, as the vector versions keep lanes apart */
static float dot_plain(const float *a, const float *b, int64_t n) {
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; k++) s[k] += a[i + k] * b[i + k];
  for (; i < n; i++) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

typedef float (*dot_fn)(const float *, const float *, int64_t);

typedef struct {
  float *gw, *gb;
  const float *gy, *x;
  const dp_window2d *g;
  int64_t o, cpg, opg; /* output channels; input and output channels a group */
  dot_fn dot;
  int64_t wp, hp; /* the padded planes' pitch and rows */
  bool failed;
} dw_call;

/* groups [g0, g1): each group's cpg input planes and opg gy planes of an image padded once, then a dot per (output
 * channel, input channel, tap) */
static void run_groups(void *ctx, int64_t g0, int64_t g1) {
  dw_call *k = ctx;
  const dp_window2d *g = k->g;
  const int64_t C = g->c, H = g->h, W = g->w, OH = g->oh, OW = g->ow, wp = k->wp, hp = k->hp, O = k->o;
  const int64_t cpg = k->cpg, opg = k->opg, taps = g->kh * g->kw, len = (OH - 1) * wp + OW;
  const size_t xsz = (size_t)(hp * wp), gsz = (size_t)(OH * wp), nt = (size_t)(opg * cpg * taps);
  float *xp = malloc(sizeof(float) * xsz * (size_t)cpg), *gp = malloc(sizeof(float) * gsz * (size_t)opg);
  double *tot = malloc(sizeof(double) * (nt + (size_t)opg));
  bool *bad = malloc(sizeof(bool) * (size_t)cpg);
  if (!xp || !gp || !tot || !bad) {
    free(xp), free(gp), free(tot), free(bad);
    __atomic_store_n(&k->failed, true, __ATOMIC_RELAXED);
    return;
  }
  double *bias = tot + nt;
  memset(xp, 0, sizeof(float) * xsz * (size_t)cpg); /* the borders stay 0: only the interiors are rewritten */
  memset(gp, 0, sizeof(float) * gsz * (size_t)opg); /* and the columns past OW */
  for (int64_t gi = g0; gi < g1; gi++) {
    for (size_t t = 0; t < nt + (size_t)opg; t++) tot[t] = 0;
    for (int64_t n = 0; n < g->n; n++) {
      for (int64_t ci = 0; ci < cpg; ci++) {
        const float *xs = k->x + (n * C + gi * cpg + ci) * H * W;
        float nonfinite = 0; /* NaN when the plane holds an Inf or a NaN (v * 0 is 0 for every finite v) */
        for (int64_t r = 0; r < H; r++) {
          float *row = xp + (size_t)ci * xsz + (size_t)((r + g->ph) * wp + g->pw);
          memcpy(row, xs + r * W, sizeof(float) * (size_t)W);
          for (int64_t j = 0; j < W; j++) nonfinite += row[j] * 0.0f;
        }
        bad[ci] = nonfinite != 0;
      }
      for (int64_t oi = 0; oi < opg; oi++) {
        const float *gs = k->gy + (n * O + gi * opg + oi) * OH * OW;
        for (int64_t r = 0; r < OH; r++) {
          memcpy(gp + (size_t)oi * gsz + (size_t)(r * wp), gs + r * OW, sizeof(float) * (size_t)OW);
          if (k->gb)
            for (int64_t j = 0; j < OW; j++) bias[oi] += gs[r * OW + j];
        }
      }
      for (int64_t oi = 0; oi < opg; oi++)
        for (int64_t ci = 0; ci < cpg; ci++) {
          const float *a = gp + (size_t)oi * gsz, *b = xp + (size_t)ci * xsz;
          double *acc = tot + (oi * cpg + ci) * taps;
          for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
              const float *bt = b + i * g->dh * wp + j * g->dw;
              if (!bad[ci]) {
                acc[i * g->kw + j] += k->dot(a, bt, len);
              } else {
                /* gy's zero columns would meet x's Inf or NaN in pairs no output has (0 * Inf is NaN): row by
                 * row, only the OW columns each output row has */
                for (int64_t r = 0; r < OH; r++) acc[i * g->kw + j] += k->dot(a + r * wp, bt + r * wp, OW);
              }
            }
        }
    }
    for (size_t t = 0; t < nt; t++) k->gw[(size_t)gi * nt + t] = (float)tot[t];
    if (k->gb)
      for (int64_t oi = 0; oi < opg; oi++) k->gb[gi * opg + oi] = (float)bias[oi];
  }
  free(xp), free(gp), free(tot), free(bad);
}

/* a group's padded planes past this are left to oneDNN */
#define DW_SCRATCH_MAX ((int64_t)8 << 20)

bool dp_cpu_conv2d_dw_grad_w_takes(const dp_window2d *g, const dp_tensor *gy) {
  if (gy->dtype != DP_F32 || gy->ndim != 4 || g->sh != 1 || g->sw != 1 || g->n < 1 || g->groups < 2) return false;
  int64_t G = g->groups, O = gy->shape[1], taps = g->kh * g->kw;
  if (g->c % G || O % G || taps > DW_MAX_TAPS) return false;
  int64_t cpg = g->c / G, opg = O / G, wp = g->ow + (g->kw - 1) * g->dw, hp = g->oh + (g->kh - 1) * g->dh;
  /* depthwise: kernels past 3x3 (oneDNN runs 3x3 as fast); grouped: fewer than 16 channels a group, where oneDNN
   * computes the weight gradient as im2col + GEMM */
  bool shape_ok = cpg == 1 && opg == 1 ? taps > 9 : cpg < 16 && opg < 16;
  /* the padded plane holds every row and column some tap reads */
  return shape_ok && g->ph + g->h <= hp && g->pw + g->w <= wp &&
         (cpg * hp * wp + opg * g->oh * wp) * 4 <= DW_SCRATCH_MAX;
}

int dp_cpu_conv2d_dw_grad_w(dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_window2d *g) {
  DP_ASSERT(dp_cpu_conv2d_dw_grad_w_takes(g, gy) && x->dtype == DP_F32 && gw->dtype == DP_F32);
  int64_t O = gy->shape[1], G = g->groups;
  DP_ASSERT(dp_numel(gw) == O * (g->c / G) * g->kh * g->kw && (!gb || dp_numel(gb) == O));
  int width = dp_cpu_vec_get()->width;
  dw_call k = {.gw = dp_data(gw),
               .gb = gb ? dp_data(gb) : NULL,
               .gy = dp_data(gy),
               .x = dp_data(x),
               .g = g,
               .o = O,
               .cpg = g->c / G,
               .opg = O / G,
               .dot = width == 16  ? dot_avx512
                      : width == 8 ? dot_avx2
                                   : dot_plain,
               .wp = g->ow + (g->kw - 1) * g->dw,
               .hp = g->oh + (g->kh - 1) * g->dh};
  int64_t per_group = g->n * k.opg * k.cpg * g->oh * k.wp * g->kh * g->kw; /* multiply-adds */
  dp_cpu_parallel_for(G, DP_GRAIN_COMPUTE / (per_group > 0 ? per_group : 1) + 1, 1, run_groups, &k);
  if (k.failed) return dp_error("conv2d: out of memory for the grouped weight gradient's planes");
  return 0;
}
