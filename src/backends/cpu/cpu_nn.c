/* CPU kernels for the bias/activation epilogue, softmax, cross-entropy and
 * row gather/scatter. float32 runs the per-ISA vector kernels (cpu_vec.h),
 * rows split over the threads of cpu_parallel.h; other float types go
 * through double (the reference). Softmax and cross-entropy work from
 * exp(x - max) (PyTorch's form) on both paths, so logits of any magnitude
 * keep full precision. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "ops/scalar_math.h"

#define LD(t, p, i) dp_load_d((const char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype)
#define ST(t, p, i, v) dp_store_d((char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype, (v))

typedef struct {
  float *y;
  const float *b;
  const dp_unary_args *act;
  int64_t c, inner;
} bias_act_ctx;

/* rows [lo, hi) of [outer, c, inner] seen as outer * c rows of inner (or,
 * for inner == 1, outer rows of c): the bias, then the activation on the
 * row still in cache */
static void bias_act_rows(void *vctx, int64_t lo, int64_t hi) {
  const bias_act_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  for (int64_t r = lo; r < hi; r++) {
    if (k->inner == 1) {
      float *row = k->y + r * k->c;
      if (k->b) v->binary(DP_B_ADD, row, row, k->b, k->c);
      if (k->act) v->unary(k->act, row, row, k->c);
    } else {
      float *row = k->y + r * k->inner;
      if (k->b) v->binary_value(DP_B_ADD, row, row, k->b[r % k->c], false, k->inner);
      if (k->act) v->unary(k->act, row, row, k->inner);
    }
  }
}

int dp_cpu_bias_act(dp_tensor *y, const dp_tensor *bias, const dp_unary_args *act, int64_t outer, int64_t c,
                    int64_t inner) {
  char *yp = dp_data(y);
  const char *bp = bias ? dp_data(bias) : NULL;
  if (y->dtype == DP_F32 && (!bias || bias->dtype == DP_F32)) {
    bias_act_ctx k = {(float *)yp, (const float *)bp, act, c, inner};
    int64_t rows = inner == 1 ? outer : outer * c, len = inner == 1 ? c : inner;
    dp_cpu_parallel_for(rows, DP_GRAIN_MEMORY / (len > 0 ? len : 1) + 1, 1, bias_act_rows, &k);
    return 0;
  }
  for (int64_t o = 0; o < outer; o++)
    for (int64_t ch = 0; ch < c; ch++) {
      double b = bp ? LD(bias, bp, ch) : 0.0;
      for (int64_t i = 0; i < inner; i++) {
        int64_t k = (o * c + ch) * inner + i;
        double v = LD(y, yp, k) + b;
        ST(y, yp, k, act ? dp_unary_d(act->op, v, &act->p) : v);
      }
    }
  return 0;
}

typedef struct {
  double *acc;
  const float *g;
  const uint16_t *h; /* bfloat16 / float16 gy (autocast's), widened a block at a time; g NULL then */
  dp_dtype dt;
  int64_t outer, c, inner;
} chsum_ctx;

enum { CHSUM_BLOCK = 512 };

/* columns [lo, hi) of [outer, c] (inner == 1): sums down the rows, four
 * rows per pass over the double accumulators (a linear's bias gradient
 * over 10000 outputs: 80 KB of them, in L2), the rows read as contiguous
 * streams; each column's order of additions is row after row, unchanged */
static void chsum_cols(void *vctx, int64_t lo, int64_t hi) {
  const chsum_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  if (k->h) { /* the same additions on 4 rows x CHSUM_BLOCK columns widened to float32 */
    float buf[4][CHSUM_BLOCK];
    for (int64_t c0 = lo; c0 < hi; c0 += CHSUM_BLOCK) {
      int64_t w = hi - c0 < CHSUM_BLOCK ? hi - c0 : CHSUM_BLOCK;
      for (int64_t o = 0; o < k->outer; o += 4) {
        const float *rows[4];
        int nr = k->outer - o < 4 ? (int)(k->outer - o) : 4;
        for (int r = 0; r < nr; r++) {
          v->cast(buf[r], DP_F32, k->h + (o + r) * k->c + c0, k->dt, w);
          rows[r] = buf[r];
        }
        v->col_acc_rows(k->acc + c0, rows, nr, w);
      }
    }
    return;
  }
  for (int64_t o = 0; o < k->outer; o += 4) {
    const float *rows[4];
    int nr = k->outer - o < 4 ? (int)(k->outer - o) : 4;
    for (int r = 0; r < nr; r++) rows[r] = k->g + (o + r) * k->c + lo;
    v->col_acc_rows(k->acc + lo, rows, nr, hi - lo);
  }
}
/* channels [lo, hi) of [outer, c, inner] (a half-precision plane widened
 * CHSUM_BLOCK values at a time, each block summed in double) */
static void chsum_planes(void *vctx, int64_t lo, int64_t hi) {
  const chsum_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  float buf[CHSUM_BLOCK];
  for (int64_t ch = lo; ch < hi; ch++) {
    double s = 0;
    for (int64_t o = 0; o < k->outer; o++) {
      int64_t at = (o * k->c + ch) * k->inner;
      if (!k->h) {
        s += v->sum(k->g + at, k->inner);
        continue;
      }
      for (int64_t i = 0; i < k->inner; i += CHSUM_BLOCK) {
        int64_t w = k->inner - i < CHSUM_BLOCK ? k->inner - i : CHSUM_BLOCK;
        v->cast(buf, DP_F32, k->h + at + i, k->dt, w);
        s += v->sum(buf, w);
      }
    }
    k->acc[ch] = s;
  }
}

int dp_cpu_channel_sum(dp_tensor *gb, const dp_tensor *gy, int64_t outer, int64_t c, int64_t inner) {
  const char *g = dp_data(gy);
  bool half = gy->dtype == DP_BF16 || gy->dtype == DP_F16;
  if (gy->dtype == DP_F32 || half) {
    /* double accumulators, then one store per channel */
    double acc_small[1024];
    double *acc = c <= 1024 ? acc_small : dp_xcalloc((size_t)c, sizeof(double));
    memset(acc, 0, sizeof(double) * (size_t)c);
    chsum_ctx k = {acc, half ? NULL : (const float *)g, half ? (const uint16_t *)g : NULL, gy->dtype, outer, c, inner};
    if (inner == 1) dp_cpu_parallel_for(c, DP_GRAIN_MEMORY / (outer > 0 ? outer : 1) + 16, 16, chsum_cols, &k);
    else dp_cpu_parallel_for(c, DP_GRAIN_MEMORY / (outer * inner > 0 ? outer * inner : 1) + 1, 1, chsum_planes, &k);
    for (int64_t i = 0; i < c; i++) ST(gb, dp_data(gb), i, acc[i]);
    if (acc != acc_small) free(acc);
    return 0;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    double s = 0;
    for (int64_t o = 0; o < outer; o++) {
      int64_t base = (o * c + ch) * inner;
      for (int64_t i = 0; i < inner; i++) s += LD(gy, g, base + i);
    }
    ST(gb, dp_data(gb), ch, s);
  }
  return 0;
}

typedef struct {
  float *y;
  const float *x, *gy;
  int64_t cols;
  bool log;
} softmax_ctx;

static void softmax_rows(void *vctx, int64_t lo, int64_t hi) {
  const softmax_ctx *k = vctx;
  for (int64_t r = lo; r < hi; r++)
    dp_cpu_vec_get()->softmax_row(k->y + r * k->cols, k->x + r * k->cols, k->cols, k->log);
}
static void softmax_bwd_rows(void *vctx, int64_t lo, int64_t hi) {
  const softmax_ctx *k = vctx;
  for (int64_t r = lo; r < hi; r++)
    dp_cpu_vec_get()->softmax_bwd_row(k->y + r * k->cols, k->gy + r * k->cols, k->x + r * k->cols, k->cols, k->log);
}
static int64_t row_grain(int64_t cols) { return DP_GRAIN_COMPUTE / (cols > 0 ? cols : 1) + 1; }

/* bfloat16 rows (a bfloat16 model's softmax outside autocast): the float32
 * row kernels on rows widened into a worker's scratch, rounded once; out is
 * y (forward, gy NULL) or gx, in x (the forward's input) or y */
typedef struct {
  uint16_t *out;
  const uint16_t *in, *gy;
  int64_t cols;
  bool log;
  int failed; /* atomic */
} softmax_bf16_ctx;

static void softmax_bf16_rows(void *vctx, int64_t lo, int64_t hi) {
  softmax_bf16_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  int64_t n = k->cols, block = n >= 2048 ? 1 : 2048 / n; /* short rows widen and round a block of rows a call */
  size_t len = (size_t)(block * n);
  float *a = malloc(sizeof(float) * (3 * len + 1)), *b = a + len, *o = b + len;
  if (!a) {
    __atomic_store_n(&k->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r0 = lo; r0 < hi; r0 += block) {
    int64_t m = hi - r0 < block ? hi - r0 : block;
    v->cast(a, DP_F32, k->in + r0 * n, DP_BF16, m * n);
    if (k->gy) v->cast(b, DP_F32, k->gy + r0 * n, DP_BF16, m * n);
    for (int64_t r = 0; r < m; r++) {
      if (k->gy) v->softmax_bwd_row(o + r * n, b + r * n, a + r * n, n, k->log);
      else v->softmax_row(o + r * n, a + r * n, n, k->log);
    }
    v->cast(k->out + r0 * n, DP_BF16, o, DP_F32, m * n);
  }
  free(a);
}

static int softmax_bf16(uint16_t *out, const uint16_t *in, const uint16_t *gy, int64_t rows, int64_t cols, bool log) {
  softmax_bf16_ctx k = {out, in, gy, cols, log, 0};
  dp_cpu_parallel_for(rows, row_grain(cols), 1, softmax_bf16_rows, &k);
  return k.failed ? dp_error("softmax: out of memory for a row of %lld values", (long long)cols) : 0;
}

int dp_cpu_softmax(dp_tensor *y, const dp_tensor *x, int64_t rows, int64_t cols, bool logsm) {
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
  if (x->dtype == DP_F32 && y->dtype == DP_F32) {
    softmax_ctx k = {(float *)yp, (const float *)xp, NULL, cols, logsm};
    dp_cpu_parallel_for(rows, row_grain(cols), 1, softmax_rows, &k);
    return 0;
  }
  if (x->dtype == DP_BF16 && y->dtype == DP_BF16)
    return softmax_bf16((uint16_t *)yp, (const uint16_t *)xp, NULL, rows, cols, logsm);
  for (int64_t r = 0; r < rows; r++) {
    int64_t b = r * cols;
    double mx = -INFINITY;
    for (int64_t j = 0; j < cols; j++) {
      double v = LD(x, xp, b + j);
      if (v > mx || v != v) mx = v;
    }
    double s = 0;
    for (int64_t j = 0; j < cols; j++) s += exp(LD(x, xp, b + j) - mx);
    double log_s = log(s);
    for (int64_t j = 0; j < cols; j++) {
      ST(y, yp, b + j, dp_softmax_out_d(LD(x, xp, b + j), mx, log_s, logsm));
    }
  }
  return 0;
}

int dp_cpu_softmax_backward(dp_tensor *gx, const dp_tensor *gy, const dp_tensor *y, int64_t rows, int64_t cols,
                            bool logsm) {
  const char *gp = dp_data(gy), *yp = dp_data(y);
  char *xp = dp_data(gx);
  if (gx->dtype == DP_F32 && gy->dtype == DP_F32 && y->dtype == DP_F32) {
    softmax_ctx k = {(float *)xp, (const float *)yp, (const float *)gp, cols, logsm};
    dp_cpu_parallel_for(rows, row_grain(cols), 1, softmax_bwd_rows, &k);
    return 0;
  }
  if (gx->dtype == DP_BF16 && gy->dtype == DP_BF16 && y->dtype == DP_BF16)
    return softmax_bf16((uint16_t *)xp, (const uint16_t *)yp, (const uint16_t *)gp, rows, cols, logsm);
  for (int64_t r = 0; r < rows; r++) {
    int64_t b = r * cols;
    double dot = 0;
    for (int64_t j = 0; j < cols; j++) dot += logsm ? LD(gy, gp, b + j) : LD(gy, gp, b + j) * LD(y, yp, b + j);
    for (int64_t j = 0; j < cols; j++) {
      /* log_softmax: gx = gy - exp(y) * sum(gy); softmax: gx = y * (gy - sum(gy*y)) */
      ST(gx, xp, b + j, dp_softmax_grad_d(LD(gy, gp, b + j), LD(y, yp, b + j), dot, logsm));
    }
  }
  return 0;
}

static int check_target(int64_t t, int64_t classes, int64_t base, int64_t row, int64_t ignore) {
  if (t == ignore) return 0;
  if (t < base || t - base >= classes)
    return dp_error("target %" PRId64 " at position %" PRId64 " is out of range: classes are %" PRId64 "..%" PRId64, t,
                    row + base, base, classes - 1 + base);
  return 0;
}

typedef struct {
  const dp_ce_args *a;
  dp_tensor *loss, *lse, *gx;
} ce_ctx;

/* float32 rows [lo, hi): the row's (max, log_s) as the softmax's, the loss
 * in double from them (dp_ce_loss_d) */
static void ce_rows(void *vctx, int64_t lo, int64_t hi) {
  const ce_ctx *k = vctx;
  const dp_ce_args *a = k->a;
  int64_t C = a->x->shape[1];
  const float *x = dp_data(a->x);
  const int64_t *tp = dp_data(a->target);
  double *lse = dp_data(k->lse);
  for (int64_t r = lo; r < hi; r++) {
    const float *row = x + r * C;
    double mx, log_s, sum_d = 0;
    /* the row's sum only for label smoothing (a pass over the row less) */
    dp_cpu_vec_get()->lse_row(row, C, &mx, &log_s, a->smoothing > 0 ? &sum_d : NULL, r + 1 < hi ? row + C : NULL);
    lse[2 * r] = mx, lse[2 * r + 1] = log_s;
    int64_t t = tp[r];
    double loss = t == a->ignore_index ? 0.0 : dp_ce_loss_d(mx, log_s, row[t - a->base], sum_d, C, a->smoothing);
    ST(k->loss, dp_data(k->loss), r, loss);
  }
}

int dp_cpu_cross_entropy(dp_tensor *loss, dp_tensor *lse, const dp_ce_args *a) {
  const dp_tensor *x = a->x, *target = a->target;
  int64_t base = a->base, ignore_index = a->ignore_index;
  double smoothing = a->smoothing;
  int64_t rows = x->shape[0], C = x->shape[1];
  const char *xp = dp_data(x);
  const int64_t *tp = dp_data(target);
  for (int64_t r = 0; r < rows; r++)
    if (check_target(tp[r], C, base, r, ignore_index)) return -1;
  if (x->dtype == DP_F32) {
    ce_ctx k = {a, loss, lse, NULL};
    dp_cpu_parallel_for(rows, row_grain(C), 1, ce_rows, &k);
    return 0;
  }
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = tp[r], b = r * C;
    double mx = -INFINITY, s = 0, sum_d = 0; /* sum_d: of x - max (dp_ce_loss_d) */
    for (int64_t j = 0; j < C; j++) {
      double v = LD(x, xp, b + j);
      mx = v > mx ? v : mx;
    }
    for (int64_t j = 0; j < C; j++) {
      double v = LD(x, xp, b + j);
      s += exp(v - mx), sum_d += v - mx;
    }
    double log_s = log(s);
    ((double *)dp_data(lse))[2 * r] = mx, ((double *)dp_data(lse))[2 * r + 1] = log_s;
    if (t == ignore_index) {
      ST(loss, dp_data(loss), r, 0.0);
      continue;
    }
    ST(loss, dp_data(loss), r, dp_ce_loss_d(mx, log_s, LD(x, xp, b + t - base), sum_d, C, smoothing));
  }
  return 0;
}

static void ce_bwd_rows(void *vctx, int64_t lo, int64_t hi) {
  const ce_ctx *k = vctx;
  const dp_ce_args *a = k->a;
  int64_t C = a->x->shape[1];
  const float *x = dp_data(a->x);
  float *g = dp_data(k->gx);
  const int64_t *tp = dp_data(a->target);
  const double *lse = dp_data(a->lse);
  double off = a->smoothing / (double)C;
  for (int64_t r = lo; r < hi; r++) {
    int64_t t = tp[r];
    double sc = LD(a->scale, dp_data(a->scale), r);
    float *gr = g + r * C;
    /* an ignored row's gradient is 0; a zero upstream gradient is not a
     * shortcut (0 * NaN is NaN for NaN or infinite logits, as PyTorch's) */
    if (t == a->ignore_index) {
      memset(gr, 0, sizeof(float) * (size_t)C);
      continue;
    }
    const float *row = x + r * C;
    dp_cpu_vec_get()->ce_bwd_row(gr, row, C, lse[2 * r], lse[2 * r + 1], off, sc, r + 1 < hi ? row + C : NULL);
    /* p_t - 1 in double: near 1 it cancels */
    gr[t - a->base] = (float)dp_ce_grad_d(row[t - a->base], lse[2 * r], lse[2 * r + 1], 1, C, a->smoothing, sc);
  }
}

int dp_cpu_cross_entropy_backward(dp_tensor *gx, const dp_ce_args *a) {
  const dp_tensor *x = a->x, *lse = a->lse, *target = a->target, *scale = a->scale;
  int64_t base = a->base, ignore_index = a->ignore_index;
  double smoothing = a->smoothing;
  int64_t rows = x->shape[0], C = x->shape[1];
  const char *xp = dp_data(x), *sp = dp_data(scale);
  const double *lp = dp_data(lse);
  const int64_t *tp = dp_data(target);
  char *gp = dp_data(gx);
  if (x->dtype == DP_F32 && gx->dtype == DP_F32) {
    ce_ctx k = {a, NULL, NULL, gx};
    dp_cpu_parallel_for(rows, row_grain(C), 1, ce_bwd_rows, &k);
    return 0;
  }
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = tp[r], b = r * C;
    double sc = LD(scale, sp, r);
    /* an ignored row's gradient is 0 (pytorch_differences.md: ignored_rows_zero_gradient); a zero upstream
     * gradient is not a shortcut: 0 * NaN is NaN for NaN or infinite logits, as PyTorch's */
    if (t == ignore_index) {
      for (int64_t j = 0; j < C; j++) ST(gx, gp, b + j, 0.0);
      continue;
    }
    double mx = lp[2 * r], log_s = lp[2 * r + 1];
    for (int64_t j = 0; j < C; j++)
      ST(gx, gp, b + j, dp_ce_grad_d(LD(x, xp, b + j), mx, log_s, j == t - base, C, smoothing, sc));
  }
  return 0;
}

int dp_cpu_index_select(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int64_t base) {
  int64_t n = dp_numel(idx), rows = src->shape[0];
  int64_t d = rows ? dp_numel(src) / rows : 0;
  const int64_t *ip = dp_data(idx);
  size_t es = dp_elsize(src), row_bytes = (size_t)d * es;
  const char *sp = dp_data(src);
  char *op = dp_data(out);
  for (int64_t i = 0; i < n; i++) {
    if (ip[i] < base || ip[i] - base >= rows) /* ip[i] >= base first: no overflow */
      return dp_error("index %" PRId64 " at position %" PRId64 " is out of range %" PRId64 "..%" PRId64, ip[i],
                      i + base, base, rows - 1 + base);
    int64_t k = ip[i] - base;
    memcpy(op + (size_t)i * row_bytes, sp + (size_t)k * row_bytes, row_bytes);
  }
  return 0;
}

int dp_cpu_index_add(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int64_t base) {
  int64_t n = dp_numel(idx), rows = dst->shape[0];
  int64_t d = rows ? dp_numel(dst) / rows : 0;
  const int64_t *ip = dp_data(idx);
  char *dp = dp_data(dst);
  const char *sp = dp_data(src);
  for (int64_t i = 0; i < n; i++) {
    if (ip[i] < base || ip[i] - base >= rows) /* ip[i] >= base first: no overflow */
      return dp_error("index %" PRId64 " at position %" PRId64 " is out of range %" PRId64 "..%" PRId64, ip[i],
                      i + base, base, rows - 1 + base);
    int64_t k = ip[i] - base;
    if (dst->dtype == DP_F32 && src->dtype == DP_F32 && d < 256) { /* short rows (an embedding's gradient): a loop
                                                                        here, not a kernel call per row */
      float *o = (float *)dp + k * d;
      const float *s = (const float *)sp + i * d;
      for (int64_t j = 0; j < d; j++) o[j] += s[j];
    } else if (dst->dtype == DP_F32 && src->dtype == DP_F32) {
      float *o = (float *)dp + k * d;
      dp_cpu_vec_get()->binary(DP_B_ADD, o, o, (const float *)sp + i * d, d);
    } else {
      for (int64_t j = 0; j < d; j++) ST(dst, dp, k * d + j, LD(dst, dp, k * d + j) + LD(src, sp, i * d + j));
    }
  }
  return 0;
}
