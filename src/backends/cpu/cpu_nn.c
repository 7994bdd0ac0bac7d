/* CPU kernels for the bias/activation epilogue, softmax, cross-entropy and
 * row gather/scatter. float32 has unit-stride loops; other float types go
 * through double (the reference). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/error.h"
#include "ops/scalar_math.h"

#define LD(t, p, i) dp_load_d((const char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype)
#define ST(t, p, i, v) dp_store_d((char *)(p) + (size_t)(i)*dp_elsize(t), (t)->dtype, (v))

int dp_cpu_bias_act(dp_tensor *y, const dp_tensor *bias, const dp_unary_args *act, int64_t outer, int64_t c,
                    int64_t inner) {
  char *yp = dp_data(y);
  const char *bp = bias ? dp_data(bias) : NULL;
  if (y->dtype == DP_F32 && (!bias || bias->dtype == DP_F32)) {
    /* row by row, so the activation pass reads what the bias pass left in cache */
    float *yf = (float *)yp;
    const float *bf = (const float *)bp;
    if (inner == 1) { /* [rows, c]: a linear layer's output */
      for (int64_t o = 0; o < outer; o++) {
        float *row = yf + o * c;
        if (bf)
          for (int64_t i = 0; i < c; i++) row[i] += bf[i];
        if (act) dp_cpu_unary_f32_(act, row, c);
      }
      return 0;
    }
    for (int64_t o = 0; o < outer; o++)
      for (int64_t ch = 0; ch < c; ch++) {
        float *row = yf + (o * c + ch) * inner;
        float b = bf ? bf[ch] : 0.f; /* 0 without a bias, as the double path below */
        for (int64_t i = 0; i < inner; i++) row[i] += b;
        if (act) dp_cpu_unary_f32_(act, row, inner);
      }
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

int dp_cpu_channel_sum(dp_tensor *gb, const dp_tensor *gy, int64_t outer, int64_t c, int64_t inner) {
  const char *g = dp_data(gy);
  if (gy->dtype == DP_F32 && inner == 1) {
    /* [rows, c]: column sums, row by row (unit stride), double accumulators */
    double acc_small[1024];
    double *acc = c <= 1024 ? acc_small : dp_xcalloc((size_t)c, sizeof(double));
    memset(acc, 0, sizeof(double) * (size_t)c);
    const float *gf = (const float *)g;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < c; i++) acc[i] += gf[o * c + i];
    for (int64_t i = 0; i < c; i++) ST(gb, dp_data(gb), i, acc[i]);
    if (acc != acc_small) free(acc);
    return 0;
  }
  for (int64_t ch = 0; ch < c; ch++) {
    double s = 0;
    for (int64_t o = 0; o < outer; o++) {
      int64_t base = (o * c + ch) * inner;
      if (gy->dtype == DP_F32)
        for (int64_t i = 0; i < inner; i++) s += ((const float *)g)[base + i];
      else
        for (int64_t i = 0; i < inner; i++) s += LD(gy, g, base + i);
    }
    ST(gb, dp_data(gb), ch, s);
  }
  return 0;
}

int dp_cpu_softmax(dp_tensor *y, const dp_tensor *x, int64_t rows, int64_t cols, bool logsm) {
  const char *xp = dp_data(x);
  char *yp = dp_data(y);
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

int dp_cpu_cross_entropy(dp_tensor *loss, dp_tensor *lse, const dp_ce_args *a) {
  const dp_tensor *x = a->x, *target = a->target;
  int64_t base = a->base, ignore_index = a->ignore_index;
  double smoothing = a->smoothing;
  int64_t rows = x->shape[0], C = x->shape[1];
  const char *xp = dp_data(x);
  const int64_t *tp = dp_data(target);
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = tp[r];
    if (check_target(t, C, base, r, ignore_index)) return -1;
    int64_t b = r * C;
    double mx = -INFINITY, s = 0, sum_d = 0; /* sum_d: of x - max (dp_ce_loss_d) */
    if (x->dtype == DP_F32) {
      const float *row = (const float *)xp + b;
      for (int64_t j = 0; j < C; j++) mx = row[j] > mx ? row[j] : mx;
      for (int64_t j = 0; j < C; j++) s += exp((double)row[j] - mx), sum_d += (double)row[j] - mx;
    } else {
      for (int64_t j = 0; j < C; j++) {
        double v = LD(x, xp, b + j);
        mx = v > mx ? v : mx;
      }
      for (int64_t j = 0; j < C; j++) {
        double v = LD(x, xp, b + j);
        s += exp(v - mx), sum_d += v - mx;
      }
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

int dp_cpu_cross_entropy_backward(dp_tensor *gx, const dp_ce_args *a) {
  const dp_tensor *x = a->x, *lse = a->lse, *target = a->target, *scale = a->scale;
  int64_t base = a->base, ignore_index = a->ignore_index;
  double smoothing = a->smoothing;
  int64_t rows = x->shape[0], C = x->shape[1];
  const char *xp = dp_data(x), *sp = dp_data(scale);
  const double *lp = dp_data(lse);
  const int64_t *tp = dp_data(target);
  char *gp = dp_data(gx);
  double off = smoothing / (double)C;
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
    if (x->dtype == DP_F32 && gx->dtype == DP_F32) {
      const float *row = (const float *)xp + b;
      float *g = (float *)gp + b;
      for (int64_t j = 0; j < C; j++) g[j] = (float)((dp_softmax_out_d(row[j], mx, log_s, 0) - off) * sc);
      g[t - base] = (float)dp_ce_grad_d(row[t - base], mx, log_s, 1, C, smoothing, sc); /* p_t - 1 in double */
      continue;
    }
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
    if (dst->dtype == DP_F32 && src->dtype == DP_F32) {
      float *o = (float *)dp + k * d;
      const float *s = (const float *)sp + i * d;
      for (int64_t j = 0; j < d; j++) o[j] += s[j];
    } else {
      for (int64_t j = 0; j < d; j++) ST(dst, dp, k * d + j, LD(dst, dp, k * d + j) + LD(src, sp, i * d + j));
    }
  }
  return 0;
}
