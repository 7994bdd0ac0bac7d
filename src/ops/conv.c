/* 2-d convolution as im2col + GEMM (with groups and dilation), and its
 * gradients.
 *
 * Forward, for a chunk of images at a time: cols [nb, C*kh*kw, oh*ow] =
 * im2col(x) (the window's dilation applied there), then for each group g
 * y[n, g] = W_g [O/G, C/G*kh*kw] @ cols[n, g] as one batched GEMM over the
 * chunk (W_g broadcast with batch stride 0; a group's rows of cols, of W
 * and of y are contiguous slices), then the bias through the
 * bias/activation epilogue. Chunks bound the column buffer (about 32 MiB)
 * so a large batch of large images never needs a huge temporary. A 1x1
 * kernel with stride 1, no padding and no dilation needs no columns: x
 * itself is the column matrix.
 *
 * Backward recomputes the columns per chunk rather than keeping them from
 * the forward (they are kh*kw times the input's size):
 *   gW_g += gy[n, g] @ cols[n, g]^T   (one GEMM per image and group, accumulating)
 *   gcols[n, g] = W_g^T @ gy[n, g]     (batched), gx = col2im(gcols)
 *   gb = sum of gy over n, oh, ow
 * On the CPU, float32 and float64 convolutions with tiny outputs skip
 * both that and oneDNN: a single output position is one GEMM over the
 * pixels its window covers, and an input with no more pixels than kernel
 * taps is one GEMM with the weights unrolled (both below: no products on
 * padding). The rest of the dense float32 ones go to oneDNN. */
#include <string.h>

#include "ops/autocast.h"
#include "ops/conv_internal.h"
#include "ops/scalar_math.h"

#define COLS_BUDGET_BYTES ((int64_t)32 << 20)

/* The window of an input [n, c, h, w] under w [O, C/G, kh, kw]: -1 when it does not fit (no output position;
 * check_conv_args names the sizes), 0 with g filled. */
static int window_of(dp_window2d *g, const int64_t nchw[4], const dp_tensor *w, const dp_conv2d_args *a) {
  g->n = nchw[0], g->c = nchw[1], g->h = nchw[2], g->w = nchw[3];
  g->kh = w->shape[2], g->kw = w->shape[3];
  g->sh = a->stride[0], g->sw = a->stride[1], g->ph = a->padding[0], g->pw = a->padding[1];
  g->dh = a->dilation[0], g->dw = a->dilation[1];
  g->groups = a->groups;
  if (dp_window_size(g->h, g->kh, g->sh, g->ph, g->dh, false, &g->oh) ||
      dp_window_size(g->w, g->kw, g->sw, g->pw, g->dw, false, &g->ow) || g->oh < 1 || g->ow < 1)
    return -1;
  dp_window_one_step(g);
  return 0;
}

/* x [N, C, H, W] or [C, H, W] (N = 1) */
static int conv_window(dp_window2d *g, const dp_tensor *x, const dp_tensor *w, const dp_conv2d_args *a) {
  int o = x->ndim - 3;
  return window_of(g, (int64_t[]){o ? x->shape[0] : 1, x->shape[o], x->shape[o + 1], x->shape[o + 2]}, w, a);
}

int dp_conv_geometry(conv_geom *cg, const int64_t nchw[4], const dp_tensor *w, const dp_conv2d_args *a) {
  dp_window2d *g = &cg->g;
  if (window_of(g, nchw, w, a)) return -1;
  cg->groups = a->groups;
  cg->outc = w->shape[0];
  cg->opg = cg->outc / a->groups;
  cg->cpg = g->c / a->groups;
  cg->ck = cg->cpg * g->kh * g->kw;
  cg->L = g->oh * g->ow;
  /* (the output plane must be the input's too: a stride past an axis of one output position is 1 here, see
   * dp_window_one_step, and that axis keeps only its first input) */
  cg->direct = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->oh == g->h &&
               g->ow == g->w;
  return 0;
}

/* (the sizes were checked by check_conv_args) */
static void conv_geometry(conv_geom *cg, const dp_tensor *x, const dp_tensor *w, const dp_conv2d_args *a) {
  dp_conv_geometry(cg, x->shape, w, a);
}

/* Images per chunk so that a chunk's columns fit the budget (at least 1). */
static int64_t chunk_images(const conv_geom *cg, size_t es) {
  int64_t per = cg->groups * cg->ck * cg->L * (int64_t)es;
  int64_t nb = per > 0 ? COLS_BUDGET_BYTES / per : cg->g.n;
  if (nb < 1) nb = 1;
  return nb > cg->g.n ? cg->g.n : nb;
}

/* C[b] = op(A[b]) @ op(B[b]) (+ beta C[b]) on row-major matrices with row
 * strides lda, ldb, ldc and batch strides sa, sb, sc. */
static int gemm(dp_tensor *like, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, const void *a,
                int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, void *c, int64_t ldc, int64_t sc,
                double beta) {
  dp_gemm_args ga = {.dtype = like->dtype,
                     .trans_a = ta,
                     .trans_b = tb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .batch = batch,
                     .alpha = 1.0,
                     .beta = beta,
                     .a = a,
                     .lda = lda,
                     .stride_a = sa,
                     .b = b,
                     .ldb = ldb,
                     .stride_b = sb,
                     .c = c,
                     .ldc = ldc,
                     .stride_c = sc,
                     .device = dp_dev(like).index};
  return dp_backend_of(like)->gemm(&ga);
}

static char *elem_ptr(const dp_tensor *t, int64_t i) { return (char *)dp_data(t) + (size_t)i * dp_elsize(t); }

/* y [N, O, L] (contiguous) = conv(x, w) without bias. */
static int conv_forward(dp_tensor *y, dp_tensor *x, dp_tensor *w, const conv_geom *cg) {
  const dp_backend *be = dp_backend_of(x);
  int64_t N = cg->g.n, nb_max = chunk_images(cg, dp_elsize(x)), G = cg->groups, CK = cg->ck, L = cg->L;
  int64_t O = cg->outc, OG = cg->opg, rows = G * CK; /* rows of one image's columns */
  DP_SCOPE(s);
  dp_tensor *cols =
      cg->direct ? NULL : dp_scope_add(&s, dp_empty(x->dtype, 3, (int64_t[]){nb_max, rows, L}, dp_dev(x)));
  if (!cg->direct && !cols) return -1;
  for (int64_t n0 = 0; n0 < N; n0 += nb_max) {
    int64_t nb = N - n0 < nb_max ? N - n0 : nb_max;
    const char *src = elem_ptr(x, n0 * rows * L);
    if (cols) {
      if (be->im2col(cols, x, &cg->g, n0, nb)) return -1;
      src = dp_data(cols);
    }
    size_t es = dp_elsize(x);
    for (int64_t gi = 0; gi < G; gi++)
      if (gemm(y, false, false, OG, L, CK, nb, elem_ptr(w, gi * OG * CK), CK, 0, src + (size_t)(gi * CK * L) * es, L,
               rows * L, elem_ptr(y, n0 * O * L + gi * OG * L), L, O * L, 0.0))
        return -1;
  }
  return 0;
}

/* gx (if wanted) and gw (if wanted) from gy [N, O, L] contiguous. */
static int conv_backward_data(dp_tensor *gx, dp_tensor *gw, dp_tensor *gy, dp_tensor *x, dp_tensor *w,
                              const conv_geom *cg) {
  const dp_backend *be = dp_backend_of(gy);
  int64_t N = cg->g.n, nb_max = chunk_images(cg, dp_elsize(gy)), O = cg->outc, OG = cg->opg, CK = cg->ck, L = cg->L;
  int64_t G = cg->groups, rows = G * CK;
  size_t es = dp_elsize(gy);
  DP_SCOPE(s);
  dp_tensor *cols = NULL, *gcols = NULL;
  if (!cg->direct) {
    int64_t sh[3] = {nb_max, rows, L};
    if (gw && !(cols = dp_scope_add(&s, dp_empty(gy->dtype, 3, sh, dp_dev(gy))))) return -1;
    if (gx && !(gcols = dp_scope_add(&s, dp_empty(gy->dtype, 3, sh, dp_dev(gy))))) return -1;
  }
  if (gx && !cg->direct && dp_fill_(gx, 0.0)) return -1;
  if (gw && N == 0 && dp_fill_(gw, 0.0)) return -1; /* no image, no GEMM to initialise it */
  for (int64_t n0 = 0; n0 < N; n0 += nb_max) {
    int64_t nb = N - n0 < nb_max ? N - n0 : nb_max;
    const char *gyp = elem_ptr(gy, n0 * O * L);
    if (gw) {
      const char *src = elem_ptr(x, n0 * rows * L);
      if (cols) {
        if (be->im2col(cols, x, &cg->g, n0, nb)) return -1;
        src = dp_data(cols);
      }
      /* gW_g [OG, CK] += gy[n, g] [OG, L] @ cols[n, g]^T: one GEMM per
       * image, since a batched GEMM writes one output per batch entry */
      for (int64_t i = 0; i < nb; i++)
        for (int64_t gi = 0; gi < G; gi++)
          if (gemm(gw, false, true, OG, CK, L, 1, gyp + (size_t)(i * O * L + gi * OG * L) * es, L, 0,
                   src + (size_t)(i * rows * L + gi * CK * L) * es, L, 0, elem_ptr(gw, gi * OG * CK), CK, 0,
                   (n0 + i) ? 1.0 : 0.0))
            return -1;
    }
    if (gx) { /* gcols[n, g] [CK, L] = W_g^T [CK, OG] @ gy[n, g] [OG, L] */
      char *dst = gcols ? (char *)dp_data(gcols) : elem_ptr(gx, n0 * rows * L);
      for (int64_t gi = 0; gi < G; gi++)
        if (gemm(gy, true, false, CK, L, OG, nb, elem_ptr(w, gi * OG * CK), CK, 0, gyp + (size_t)(gi * OG * L) * es, L,
                 O * L, dst + (size_t)(gi * CK * L) * es, L, rows * L, 0.0))
          return -1;
      if (gcols && be->col2im(gx, gcols, &cg->g, n0, nb)) return -1;
    }
  }
  return 0;
}

/* ---- one output position: the convolution is one GEMM ----
 * When the output is 1x1 (ResNet's last stages on small images: a 3x3
 * kernel, padding 1, over a 1x1 or 2x2 input), every output reads the same
 * input pixels through the same taps: the input rows 0..hv-1 and columns
 * 0..wv-1 meet the taps ph.., pw.. and the other taps see only padding.
 * So y [N, O] = x' [N, C*hv*wv] @ W'^T, with x' the covered pixels and W'
 * [O, C*hv*wv] the taps that meet them; gx' = gy @ W' and gW' = gy^T @ x',
 * the other taps' gradient 0. A blocked direct convolution would compute
 * every tap on padding (measured: oneDNN 0.21 ms for the weight gradient
 * of 32 images 128->128 3x3 on 1x1, where the GEMM has 0.5M products). */
typedef struct {
  int64_t hv, wv, K; /* covered input rows and columns; GEMM depth C*hv*wv */
} window1;

static bool single_window(const conv_geom *cg, const dp_tensor *like, window1 *s) {
  const dp_window2d *g = &cg->g;
  if (dp_dev(like).type != DP_CPU || (like->dtype != DP_F32 && like->dtype != DP_F64) || g->oh != 1 || g->ow != 1 ||
      cg->groups != 1 || g->dh != 1 || g->dw != 1 || g->n < 1)
    return false;
  /* input row i meets tap i + ph of the one window (stride plays no part) */
  s->hv = g->h < g->kh - g->ph ? g->h : g->kh - g->ph;
  s->wv = g->w < g->kw - g->pw ? g->w : g->kw - g->pw;
  s->K = g->c * s->hv * s->wv;
  return s->hv >= 1 && s->wv >= 1;
}

/* The [A*C, hv, wv] corner at (r0, c0) of t [A*C, rows, cols] (dense,
 * contiguous) to or from a dense block d (store: into t, the rest of t 0) */
#define CORNER_DEF(NAME, T)                                                                                            \
  static void NAME(T *t, T *d, int64_t planes, int64_t rows, int64_t cols, int64_t hv, int64_t wv, int64_t r0,         \
                   int64_t c0, bool store) {                                                                           \
    if (store) memset(t, 0, (size_t)(planes * rows * cols) * sizeof(T));                                               \
    for (int64_t a = 0; a < planes; a++)                                                                               \
      for (int64_t i = 0; i < hv; i++) {                                                                               \
        T *tp = t + (a * rows + r0 + i) * cols + c0, *dp = d + (a * hv + i) * wv;                                      \
        for (int64_t j = 0; j < wv; j++) {                                                                             \
          if (store) tp[j] = dp[j];                                                                                    \
          else dp[j] = tp[j];                                                                                          \
        }                                                                                                              \
      }                                                                                                                \
  }
CORNER_DEF(corner_f32, float)
CORNER_DEF(corner_f64, double)

static void corner(dp_tensor *t, dp_tensor *d, const window1 *s, int64_t r0, int64_t c0, bool store) {
  int64_t planes = t->shape[0] * t->shape[1], rows = t->shape[2], cols = t->shape[3];
  if (t->dtype == DP_F32) corner_f32(dp_data(t), dp_data(d), planes, rows, cols, s->hv, s->wv, r0, c0, store);
  else corner_f64(dp_data(t), dp_data(d), planes, rows, cols, s->hv, s->wv, r0, c0, store);
}

/* t's corner as a dense block: t itself when the corner is all of it */
static dp_tensor *corner_dense(dp_scope *sc, dp_tensor *t, const window1 *s, int64_t r0, int64_t c0) {
  if (r0 == 0 && c0 == 0 && s->hv == t->shape[2] && s->wv == t->shape[3]) return t;
  int64_t sh[4] = {t->shape[0], t->shape[1], s->hv, s->wv};
  dp_tensor *d = dp_scope_add(sc, dp_empty(t->dtype, 4, sh, dp_dev(t)));
  if (d) corner(t, d, s, r0, c0, false);
  return d;
}

static int window1_forward(dp_tensor *y, dp_tensor *x, dp_tensor *w, const conv_geom *cg, const window1 *s) {
  DP_SCOPE(sc);
  dp_tensor *xs = corner_dense(&sc, x, s, 0, 0), *ws = xs ? corner_dense(&sc, w, s, cg->g.ph, cg->g.pw) : NULL;
  if (!ws) return -1;
  return gemm(y, false, true, cg->g.n, cg->outc, s->K, 1, dp_data(xs), s->K, 0, dp_data(ws), s->K, 0, dp_data(y),
              cg->outc, 0, 0.0);
}

static int window1_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gy, dp_tensor *x, dp_tensor *w,
                            const conv_geom *cg, const window1 *s) {
  DP_SCOPE(sc);
  int64_t N = cg->g.n, O = cg->outc, K = s->K, ph = cg->g.ph, pw = cg->g.pw;
  if (gx) { /* gx' [N, K] = gy [N, O] @ W' [O, K] */
    dp_tensor *ws = corner_dense(&sc, w, s, ph, pw);
    bool whole = s->hv == gx->shape[2] && s->wv == gx->shape[3];
    int64_t sh[4] = {N, cg->g.c, s->hv, s->wv};
    dp_tensor *d = whole ? gx : dp_scope_add(&sc, dp_empty(gx->dtype, 4, sh, dp_dev(gx)));
    if (!ws || !d || gemm(gy, false, false, N, K, O, 1, dp_data(gy), O, 0, dp_data(ws), K, 0, dp_data(d), K, 0, 0.0))
      return -1;
    if (!whole) corner(gx, d, s, 0, 0, true);
  }
  if (gw) { /* gW' [O, K] = gy^T [O, N] @ x' [N, K] */
    dp_tensor *xs = corner_dense(&sc, x, s, 0, 0);
    bool whole = ph == 0 && pw == 0 && s->hv == gw->shape[2] && s->wv == gw->shape[3];
    int64_t sh[4] = {O, cg->g.c, s->hv, s->wv};
    dp_tensor *d = whole ? gw : dp_scope_add(&sc, dp_empty(gw->dtype, 4, sh, dp_dev(gw)));
    if (!xs || !d || gemm(gw, true, false, O, K, N, 1, dp_data(gy), O, 0, dp_data(xs), K, 0, dp_data(d), K, 0, 0.0))
      return -1;
    if (!whole) corner(gw, d, s, ph, pw, true);
  }
  return 0;
}

/* ---- small inputs: one GEMM with the unrolled weights ----
 * Where the input has no more pixels than the kernel taps (ResNet's 2x2
 * stage under 3x3 kernels), y [N, O*L] = x [N, C*H*W] @ M^T with M
 * [O*L, C*H*W] the weights unrolled: M[o, p, c, q] = W[o, c, tap(p, q)],
 * the tap joining output position p and input pixel q, 0 where none does.
 * The GEMM has no more products than the direct convolution but none on
 * padding (measured: a 2x2 3x3 conv of 64 channels computes 4 of its 9
 * taps per output). gx = gy @ M; gW folds gM = gy^T @ x back onto the
 * taps. M is at most twice the weights (unrolled_ok). */
static bool unrolled_ok(const conv_geom *cg, const dp_tensor *like) {
  const dp_window2d *g = &cg->g;
  int64_t hw = g->h * g->w, kk = g->kh * g->kw;
  return dp_dev(like).type == DP_CPU && (like->dtype == DP_F32 || like->dtype == DP_F64) && cg->groups == 1 &&
         g->dh == 1 && g->dw == 1 && g->n >= 1 && cg->L > 1 && hw <= kk && cg->L * hw <= 2 * kk;
}

/* tap[p * H*W + q]: the tap of output position p over input pixel q, -1
 * where the window misses it */
static void tap_map(int64_t *tap, const dp_window2d *g) {
  for (int64_t pi = 0; pi < g->oh; pi++)
    for (int64_t pj = 0; pj < g->ow; pj++)
      for (int64_t qi = 0; qi < g->h; qi++)
        for (int64_t qj = 0; qj < g->w; qj++) {
          int64_t ti = qi - pi * g->sh + g->ph, tj = qj - pj * g->sw + g->pw;
          bool in = ti >= 0 && ti < g->kh && tj >= 0 && tj < g->kw;
          tap[((pi * g->ow + pj) * g->h + qi) * g->w + qj] = in ? ti * g->kw + tj : -1;
        }
}

/* m [O, L, C, HW] from w [O, C, kh*kw] (fold: w = the taps' sums of m),
 * one (output position, input pixel) pair at a time: a strided [O, C]
 * plane each, no per-element tap look-up */
#define UNROLL_DEF(NAME, T)                                                                                            \
  static void NAME(T *m, T *w, const int64_t *tap, int64_t O, int64_t L, int64_t C, int64_t HW, int64_t KK,            \
                   bool fold) {                                                                                        \
    memset(fold ? w : m, 0, (size_t)(fold ? O * C * KK : O * L * C * HW) * sizeof(T));                                 \
    for (int64_t p = 0; p < L; p++)                                                                                    \
      for (int64_t q = 0; q < HW; q++) {                                                                               \
        int64_t t = tap[p * HW + q];                                                                                   \
        if (t < 0) continue;                                                                                           \
        for (int64_t o = 0; o < O; o++) {                                                                              \
          T *mo = m + (o * L + p) * C * HW + q, *wo = w + o * C * KK + t;                                              \
          if (fold)                                                                                                    \
            for (int64_t c = 0; c < C; c++) wo[c * KK] += mo[c * HW];                                                  \
          else                                                                                                         \
            for (int64_t c = 0; c < C; c++) mo[c * HW] = wo[c * KK];                                                   \
        }                                                                                                              \
      }                                                                                                                \
  }
UNROLL_DEF(unroll_f32, float)
UNROLL_DEF(unroll_f64, double)

static int unrolled(dp_tensor *m, dp_tensor *w, const conv_geom *cg, bool fold) {
  const dp_window2d *g = &cg->g;
  int64_t L = cg->L, HW = g->h * g->w;
  DP_SCOPE(sc);
  dp_tensor *tap = dp_scope_add(&sc, dp_empty(DP_I64, 1, (int64_t[]){L * HW}, dp_dev(w)));
  if (!tap) return -1;
  tap_map(dp_data(tap), g);
  if (w->dtype == DP_F32) unroll_f32(dp_data(m), dp_data(w), dp_data(tap), cg->outc, L, g->c, HW, g->kh * g->kw, fold);
  else unroll_f64(dp_data(m), dp_data(w), dp_data(tap), cg->outc, L, g->c, HW, g->kh * g->kw, fold);
  return 0;
}

/* y (x, gy, gx contiguous) and the gradients by the unrolled weights */
static int unrolled_forward(dp_tensor *y, dp_tensor *x, dp_tensor *w, const conv_geom *cg) {
  DP_SCOPE(sc);
  int64_t N = cg->g.n, OL = cg->outc * cg->L, K = cg->g.c * cg->g.h * cg->g.w;
  dp_tensor *m = dp_scope_add(&sc, dp_empty(w->dtype, 2, (int64_t[]){OL, K}, dp_dev(w)));
  if (!m || unrolled(m, w, cg, false)) return -1;
  return gemm(y, false, true, N, OL, K, 1, dp_data(x), K, 0, dp_data(m), K, 0, dp_data(y), OL, 0, 0.0);
}

static int unrolled_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gy, dp_tensor *x, dp_tensor *w,
                             const conv_geom *cg) {
  DP_SCOPE(sc);
  int64_t N = cg->g.n, OL = cg->outc * cg->L, K = cg->g.c * cg->g.h * cg->g.w;
  dp_tensor *m = dp_scope_add(&sc, dp_empty(w->dtype, 2, (int64_t[]){OL, K}, dp_dev(w)));
  if (!m) return -1;
  if (gx && (unrolled(m, w, cg, false) ||
             gemm(gy, false, false, N, K, OL, 1, dp_data(gy), OL, 0, dp_data(m), K, 0, dp_data(gx), K, 0, 0.0)))
    return -1;
  if (gw && (gemm(gw, true, false, OL, K, N, 1, dp_data(gy), OL, 0, dp_data(x), K, 0, dp_data(m), K, 0, 0.0) ||
             unrolled(m, gw, cg, true)))
    return -1;
  return 0;
}

/* The backends' direct convolutions (oneDNN) are offered every case (groups
 * and dilation included: oneDNN's depthwise and grouped kernels) and
 * decline what they do not run (returning 0); the rest is im2col + GEMM. */

static dp_conv2d_args load_args(const dp_node *n) {
  dp_conv2d_args a = {{n->i[0], n->i[1]}, {n->i[2], n->i[3]}, {n->i[4], n->i[5]}, n->i[6]};
  return a;
}

int dp_conv_grads(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, dp_tensor *gy, dp_tensor *x, dp_tensor *w,
                  const conv_geom *cgp) {
  conv_geom cg = *cgp;
  bool want_x = gx != NULL, want_w = gw != NULL, want_b = gb != NULL;
  /* the backends read x only for the weights' gradient (its dtype and shape are gx's) */
  if (!x) x = gx;
  /* a backend's direct convolution (oneDNN on the CPU) where it takes the
   * case: gx, gw and gb at once (gb with gw only) */
  const dp_backend *be = dp_backend_of(gy);
  int direct = 0; /* 1: gx and gw by the backend; 2: gw only */
  window1 w1;
  bool one = single_window(&cg, gy, &w1), unroll = !one && unrolled_ok(&cg, gy);
  if (one && (want_x || want_w) && window1_backward(gx, gw, gy, x, w, &cg, &w1)) return -1;
  if (unroll && (want_x || want_w) && unrolled_backward(gx, gw, gy, x, w, &cg)) return -1;
  one = one || unroll; /* either: done with gx and gw */
  if (!one && be->conv2d_backward && (want_x || want_w)) {
    direct = be->conv2d_backward(gx, gw, want_w ? gb : NULL, gy, x, w, &cg.g);
    if (direct == 0 && want_x && want_w && (direct = be->conv2d_backward(NULL, gw, gb, gy, x, w, &cg.g)) > 0)
      direct = 2;
  }
  if (direct < 0) return -1;
  if (!one && !direct && (want_x || want_w) && conv_backward_data(gx, gw, gy, x, w, &cg)) return -1;
  if (direct == 2 && conv_backward_data(gx, NULL, gy, x, w, &cg)) return -1;
  if (want_b && !(direct && want_w) && be->channel_sum(gb, gy, cg.g.n, cg.outc, cg.L)) return -1;
  return 0;
}

static int conv2d_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  dp_tensor *x = dp_node_saved(n, 0), *w = dp_node_saved(n, 1);
  conv_geom cg;
  dp_conv2d_args a = load_args(n);
  conv_geometry(&cg, x, w, &a);
  bool want_x = dp_node_needs(n, 0), want_w = dp_node_needs(n, 1), want_b = n->n_inputs > 2 && dp_node_needs(n, 2);
  DP_SCOPE(s);
  dp_tensor *gy = dp_scope_add(&s, dp_contiguous_raw(gout[0]));
  dp_tensor *gx = NULL, *gw = NULL, *gb = NULL;
  if (!gy) return -1;
  if (want_x && !(gx = dp_scope_add(&s, dp_empty(x->dtype, 4, x->shape, dp_dev(x))))) return -1;
  if (want_w && !(gw = dp_scope_add(&s, dp_empty(w->dtype, 4, w->shape, dp_dev(w))))) return -1;
  if (want_b && !(gb = dp_scope_add(&s, dp_empty(gy->dtype, 1, &cg.outc, dp_dev(gy))))) return -1;
  if (dp_conv_grads(gx, gw, gb, gy, x, w, &cg)) return -1;
  /* the forward lifted an unbatched [C, H, W] input to [1, C, H, W] */
  if (gx && n->in_ndim[0] == 3 && !(gx = dp_scope_add(&s, dp_reshape(gx, 3, n->in_shape[0])))) return -1;
  gin[0] = dp_scope_keep(&s, gx);
  gin[1] = dp_scope_keep(&s, gw);
  if (want_b) gin[2] = dp_scope_keep(&s, gb);
  return 0;
}

static int check_conv_args(const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_conv2d_args *a) {
  if (x->ndim != 4)
    return dp_error("conv2d: expected a 4-dimensional input [N, C, H, W] (or 3-dimensional [C, H, W]), got shape %s",
                    SHAPE(x));
  if (w->ndim != 4)
    return dp_error("conv2d: weight must be 4-dimensional [out_channels, in_channels / groups, kh, kw], got shape %s",
                    SHAPE(w));
  if (a->groups < 1) return dp_error("conv2d: groups must be >= 1, got %" PRId64, a->groups);
  if (w->shape[0] < 1 || w->shape[1] < 1)
    return dp_error("conv2d: weight of shape %s has no output or input channels", SHAPE(w));
  if (w->shape[0] % a->groups)
    return dp_error("conv2d: out_channels %" PRId64 " (weight shape %s) must be divisible by groups %" PRId64,
                    w->shape[0], SHAPE(w), a->groups);
  if (x->shape[1] % a->groups || x->shape[1] / a->groups != w->shape[1])
    return dp_error("conv2d: input has %" PRId64 " channels (shape %s) but weight of shape %s with groups %" PRId64
                    " expects %" PRId64 " input channels",
                    x->shape[1], SHAPE(x), SHAPE(w), a->groups, w->shape[1] * a->groups);
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
    return dp_error("conv2d: bias of shape %s does not match weight %s (expected [%" PRId64 "])", SHAPE(b), SHAPE(w),
                    w->shape[0]);
  if (x->dtype != w->dtype || (b && b->dtype != w->dtype) || !dp_dtype_is_float(w->dtype))
    return dp_error("conv2d: input, weight and bias must share one floating point dtype, got %s, %s%s%s",
                    dp_dtype_name(x->dtype), dp_dtype_name(w->dtype), b ? " and " : "",
                    b ? dp_dtype_name(b->dtype) : "");
  if (dp_check_same_device("conv2d", x, w) || (b && dp_check_same_device("conv2d", x, b))) return -1;
  for (int d = 0; d < 2; d++) {
    if (a->stride[d] < 1) return dp_error("conv2d: stride must be >= 1, got %" PRId64, a->stride[d]);
    if (a->padding[d] < 0) return dp_error("conv2d: padding must be >= 0, got %" PRId64, a->padding[d]);
    if (a->dilation[d] < 1) return dp_error("conv2d: dilation must be >= 1, got %" PRId64, a->dilation[d]);
  }
  for (int d = 0; d < 2; d++) {
    int64_t o;
    if (dp_window_size(x->shape[2 + d], w->shape[2 + d], a->stride[d], a->padding[d], a->dilation[d], false, &o) ||
        o < 1)
      return dp_error("conv2d: kernel size %" PRId64 "x%" PRId64 " (dilation %" PRId64 "x%" PRId64
                      ") does not fit the input %" PRId64 "x%" PRId64 " padded by %" PRId64 "x%" PRId64
                      " (input shape %s, weight shape %s)",
                      w->shape[2], w->shape[3], a->dilation[0], a->dilation[1], x->shape[2], x->shape[3], a->padding[0],
                      a->padding[1], SHAPE(x), SHAPE(w));
  }
  int64_t osh[4] = {x->shape[0], w->shape[0], 0, 0}; /* the output before its geometry multiplies the sizes */
  for (int d = 0; d < 2; d++)
    dp_window_size(x->shape[2 + d], w->shape[2 + d], a->stride[d], a->padding[d], a->dilation[d], false, &osh[2 + d]);
  if (dp_check_shape(4, osh)) {
    dp_error_prefix("conv2d: the output: ");
    return -1;
  }
  return 0;
}

int dp_conv_forward(dp_tensor *out, dp_tensor *xc, dp_tensor *wc, dp_tensor *bc, const conv_geom *cgp) {
  conv_geom cg = *cgp;
  /* a backend's direct convolution (oneDNN on the CPU) where it takes the
   * case, bias included; else one GEMM (a single output position) or
   * im2col + GEMM, then the bias */
  const dp_backend *be = dp_backend_of(out);
  window1 w1;
  bool one = single_window(&cg, xc, &w1), unroll = !one && unrolled_ok(&cg, xc);
  int direct = !one && !unroll && be->conv2d ? be->conv2d(out, xc, wc, bc, &cg.g) : 0;
  int rc = direct < 0 ? -1
           : direct   ? 0
           : one      ? window1_forward(out, xc, wc, &cg, &w1)
           : unroll   ? unrolled_forward(out, xc, wc, &cg)
                      : conv_forward(out, xc, wc, &cg);
  if (rc || (!direct && bc && cg.g.n > 0 && be->bias_act(out, bc, NULL, cg.g.n, cg.outc, cg.L))) return -1;
  return 0;
}

static dp_tensor *conv2d_impl(dp_tensor *x_in, dp_tensor *w_in, dp_tensor *b, const dp_conv2d_args *a) {
  DP_SCOPE(s);
  bool prev = dp_set_grad_enabled(false);
  dp_tensor *x = x_in->ndim == 3 ? dp_scope_add(&s, dp_unsqueeze(x_in, 0)) : x_in;
  dp_set_grad_enabled(prev);
  if (!x || check_conv_args(x, w_in, b, a)) return NULL;
  dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x)), *wc = xc ? dp_scope_add(&s, dp_contiguous_raw(w_in)) : NULL;
  /* the epilogue reads the bias as a dense [out_channels] row */
  dp_tensor *bc = b ? dp_scope_add(&s, dp_contiguous_raw(b)) : NULL;
  if (!wc || (b && !bc)) return NULL;
  conv_geom cg;
  conv_geometry(&cg, xc, wc, a);
  dp_tensor *out = dp_scope_add(&s, dp_empty(xc->dtype, 4, (int64_t[]){cg.g.n, cg.outc, cg.g.oh, cg.g.ow}, dp_dev(xc)));
  if (!out || dp_conv_forward(out, xc, wc, bc, &cg)) return NULL;
  if (x_in->ndim == 3 && !(out = dp_scope_add(&s, dp_reshape(out, 3, (int64_t[]){cg.outc, cg.g.oh, cg.g.ow}))))
    return NULL;
  dp_scope_keep(&s, out);
  dp_tensor *ins[3] = {x_in, w_in, b};
  if (dp_any_requires_grad(b ? 3 : 2, ins)) {
    dp_node *n = dp_node_new("ConvolutionBackward", conv2d_backward, b ? 3 : 2, ins, 1);
    n->i[0] = a->stride[0], n->i[1] = a->stride[1], n->i[2] = a->padding[0], n->i[3] = a->padding[1];
    n->i[4] = a->dilation[0], n->i[5] = a->dilation[1], n->i[6] = a->groups;
    dp_node_save(n, xc);
    dp_node_save(n, wc);
    dp_node_attach(n, out, 0);
    dp_node_release(n);
  }
  return out;
}

/* Whether autocast's bfloat16 convolution is declined for this case: the
 * backend says bfloat16 does not pay for its geometry (backend.h
 * conv2d_bf16_pays). Only well-formed float32 weights and a float32 or
 * bfloat16 input; anything else takes the usual path and its errors. */
static bool bf16_declined(const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_conv2d_args *a) {
  dp_autocast_state st = dp_autocast_get();
  if (!st.enabled || st.dtype != DP_BF16 || dp_dev(x).type != DP_CPU || (x->ndim != 3 && x->ndim != 4) ||
      w->ndim != 4 || w->dtype != DP_F32 || (x->dtype != DP_F32 && x->dtype != DP_BF16) || (b && b->dtype != DP_F32) ||
      a->groups < 1 || dp_dev(w).type != DP_CPU || (b && dp_dev(b).type != DP_CPU))
    return false;
  const dp_backend *be = dp_backend_of(x);
  dp_window2d g;
  if (!be->conv2d_bf16_pays || conv_window(&g, x, w, a)) return false;
  return !be->conv2d_bf16_pays(&g);
}

/* Autocast (autocast.h) casts float32 operands to bfloat16/float16 first;
 * where bfloat16 does not pay (bf16_declined) the convolution runs in
 * float32 instead (a bfloat16 input widened, exactly; the float32 weights
 * as they are) and its output is rounded to bfloat16, the dtype autocast
 * gives a convolution. */
dp_tensor *dp_conv2d(dp_tensor *x, dp_tensor *w, dp_tensor *b, const dp_conv2d_args *a) {
  if (bf16_declined(x, w, b, a)) {
    DP_SCOPE(s);
    dp_tensor *xf = x->dtype == DP_F32 ? x : dp_scope_add(&s, dp_to(x, DP_F32, dp_dev(x)));
    dp_tensor *y = xf ? dp_scope_add(&s, conv2d_impl(xf, w, b, a)) : NULL;
    return y ? dp_to(y, DP_BF16, dp_dev(y)) : NULL;
  }
  dp_autocast_scope ac;
  if (dp_autocast_cast(&ac, 3, (dp_tensor * *[]){&x, &w, &b})) return NULL;
  return dp_autocast_done(&ac, conv2d_impl(x, w, b, a));
}
