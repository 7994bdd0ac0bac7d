/* The moments behind var and std (backend.h's `moments`): over the middle
 * dim of x seen as [p, r, q], each (p, q)'s mean and sum of squared
 * deviations, in double.
 *
 * Two passes (the sum, then the squared deviations from the double mean),
 * every value widened to double before it is added or squared: a float32
 * square overflows from 1.8e19, where the std of such values does not,
 * and identical float32 values give exactly 0 (their double sum is exact,
 * so the mean is the value; float64's is corrected, see corrected()).
 * PyTorch accumulates in double too (Welford); the two agree to the last
 * float32 bit but for ties in the final rounding.
 *
 * Rows (q == 1) are cut in chunks of CHUNK values, every chunk a task of
 * the thread pool, merged in order with Chan et al.'s pairwise update: a
 * var over everything splits between threads too. Columns (q > 1) are cut
 * in blocks of COLS; a block's tasks walk its r rows twice (col_acc, then
 * col_sq_dev), with the block's accumulators in mean and m2 themselves.
 *
 * Sums of squares (backend.h's `sum_squares`, norm and mse_loss) are cut
 * the same way, in one pass: rows in chunks whose double sums add in
 * order, columns in blocks accumulated in out itself. */
#include <stdlib.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"

enum { CHUNK = 1 << 16, COLS = 512 };

typedef struct {
  const dp_tensor *x;
  int64_t r, q, chunks, blocks;
  double *mean, *m2; /* rows: one per chunk; columns: [p, q] */
} moments_ctx;

/* float64's sum rounds, so its mean can be an ulp off identical values:
 * the two-pass sum corrected by the deviations' own sum, floored at 0 */
static double corrected(double q, double sd, int64_t n) {
  double c = q - sd * sd / (double)n;
  return c < 0 ? 0 : c; /* NaN stays NaN */
}

static void chunk_moments(const dp_tensor *x, int64_t off, int64_t n, double *mean, double *m2) {
  if (x->dtype == DP_F32) {
    const dp_cpu_vec *v = dp_cpu_vec_get();
    const float *xp = (const float *)dp_data(x) + off;
    double m = v->sum(xp, n) / (double)n;
    *mean = m, *m2 = v->sq_dev(xp, n, m);
    return;
  }
  const double *xp = (const double *)dp_data(x) + off;
  double s = 0, q = 0, sd = 0;
  for (int64_t i = 0; i < n; i++) s += xp[i];
  double m = s / (double)n;
  for (int64_t i = 0; i < n; i++) q += (xp[i] - m) * (xp[i] - m), sd += xp[i] - m;
  *mean = m, *m2 = corrected(q, sd, n);
}

static void row_chunks(void *vctx, int64_t lo, int64_t hi) {
  const moments_ctx *k = vctx;
  for (int64_t t = lo; t < hi; t++) {
    int64_t row = t / k->chunks, c = t % k->chunks;
    int64_t start = c * CHUNK, n = k->r - start < CHUNK ? k->r - start : CHUNK;
    chunk_moments(k->x, row * k->r + start, n, &k->mean[t], &k->m2[t]);
  }
}

static void col_blocks(void *vctx, int64_t lo, int64_t hi) {
  const moments_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  for (int64_t t = lo; t < hi; t++) {
    int64_t pi = t / k->blocks, c0 = t % k->blocks * COLS;
    int64_t w = k->q - c0 < COLS ? k->q - c0 : COLS;
    double *m = k->mean + pi * k->q + c0, *q2 = k->m2 + pi * k->q + c0;
    int64_t base = pi * k->r * k->q + c0;
    for (int64_t j = 0; j < w; j++) m[j] = 0, q2[j] = 0;
    if (k->x->dtype == DP_F32) {
      const float *xp = (const float *)dp_data(k->x) + base;
      for (int64_t i = 0; i < k->r; i++) v->col_acc(m, xp + i * k->q, w);
      for (int64_t j = 0; j < w; j++) m[j] /= (double)k->r;
      for (int64_t i = 0; i < k->r; i++) v->col_sq_dev(q2, xp + i * k->q, m, w);
    } else {
      const double *xp = (const double *)dp_data(k->x) + base;
      for (int64_t i = 0; i < k->r; i++)
        for (int64_t j = 0; j < w; j++) m[j] += xp[i * k->q + j];
      for (int64_t j = 0; j < w; j++) m[j] /= (double)k->r;
      double sd[COLS] = {0};
      for (int64_t i = 0; i < k->r; i++)
        for (int64_t j = 0; j < w; j++) {
          double d = xp[i * k->q + j] - m[j];
          q2[j] += d * d, sd[j] += d;
        }
      for (int64_t j = 0; j < w; j++) q2[j] = corrected(q2[j], sd[j], k->r);
    }
  }
}

int dp_cpu_moments(dp_tensor *mean, dp_tensor *m2, const dp_tensor *x, int64_t p, int64_t r, int64_t q) {
  if (x->dtype != DP_F32 && x->dtype != DP_F64)
    return dp_error("moments: expected a float32 or float64 tensor, got %s", dp_dtype_name(x->dtype));
  if (r < 1 || mean->dtype != DP_F64 || m2->dtype != DP_F64 || dp_numel(mean) != p * q || dp_numel(m2) != p * q)
    return dp_error("moments: expected float64 outputs of %lld values and r >= 1", (long long)(p * q));
  double *mo = dp_data(mean), *qo = dp_data(m2);
  if (q > 1) {
    moments_ctx k = {.x = x, .r = r, .q = q, .blocks = (q + COLS - 1) / COLS, .mean = mo, .m2 = qo};
    int64_t per = r * (q < COLS ? q : COLS);
    dp_cpu_parallel_for(p * k.blocks, DP_GRAIN_MEMORY / per + 1, 1, col_blocks, &k);
    return 0;
  }
  int64_t chunks = (r + CHUNK - 1) / CHUNK;
  double *cm = mo, *cq = qo; /* one chunk a row: straight into the outputs */
  if (chunks > 1) {
    cm = malloc(sizeof(double) * 2 * (size_t)(p * chunks));
    if (!cm) return dp_error("moments: out of memory for %lld chunks", (long long)(p * chunks));
    cq = cm + p * chunks;
  }
  moments_ctx k = {.x = x, .r = r, .q = 1, .chunks = chunks, .mean = cm, .m2 = cq};
  int64_t per = r < CHUNK ? r : CHUNK;
  dp_cpu_parallel_for(p * chunks, DP_GRAIN_MEMORY / per + 1, 1, row_chunks, &k);
  if (chunks > 1) {
    for (int64_t row = 0; row < p; row++) { /* Chan et al.: (n_a, m_a, M2_a) + (n_b, m_b, M2_b) */
      double m = cm[row * chunks], s2 = cq[row * chunks], n = CHUNK;
      for (int64_t c = 1; c < chunks; c++) {
        double nb = (double)(r - c * CHUNK < CHUNK ? r - c * CHUNK : CHUNK), tot = n + nb;
        double d = cm[row * chunks + c] - m;
        m += d * (nb / tot);
        s2 += cq[row * chunks + c] + d * d * (n * nb / tot);
        n = tot;
      }
      mo[row] = m, qo[row] = s2;
    }
    free(cm);
  }
  return 0;
}

/* ---- sums of squares ---- */
typedef struct {
  const float *x, *y;
  int64_t r, q, chunks, blocks;
  double *out; /* rows: one per chunk; columns: [p, q] */
} sum_sq_ctx;

static void sum_sq_chunks(void *vctx, int64_t lo, int64_t hi) {
  const sum_sq_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  for (int64_t t = lo; t < hi; t++) {
    int64_t row = t / k->chunks, start = t % k->chunks * CHUNK;
    int64_t n = k->r - start < CHUNK ? k->r - start : CHUNK, off = row * k->r + start;
    k->out[t] = v->sum_sq(k->x + off, k->y ? k->y + off : NULL, n);
  }
}

static void sum_sq_cols(void *vctx, int64_t lo, int64_t hi) {
  const sum_sq_ctx *k = vctx;
  const dp_cpu_vec *v = dp_cpu_vec_get();
  for (int64_t t = lo; t < hi; t++) {
    int64_t pi = t / k->blocks, c0 = t % k->blocks * COLS;
    int64_t w = k->q - c0 < COLS ? k->q - c0 : COLS, base = pi * k->r * k->q + c0;
    double *acc = k->out + pi * k->q + c0;
    for (int64_t j = 0; j < w; j++) acc[j] = 0;
    for (int64_t i = 0; i < k->r; i++)
      v->col_sum_sq(acc, k->x + base + i * k->q, k->y ? k->y + base + i * k->q : NULL, w);
  }
}

int dp_cpu_sum_squares(dp_tensor *out, const dp_tensor *x, const dp_tensor *y, int64_t p, int64_t r, int64_t q) {
  if (x->dtype != DP_F32 || (y && (y->dtype != DP_F32 || dp_numel(y) != dp_numel(x))) || out->dtype != DP_F64 ||
      dp_numel(out) != p * q || dp_numel(x) != p * r * q)
    return dp_error("sum_squares: expected float32 inputs of %lld values and a float64 output of %lld",
                    (long long)(p * r * q), (long long)(p * q));
  sum_sq_ctx k = {.x = dp_data(x), .y = y ? dp_data(y) : NULL, .r = r, .q = q, .out = dp_data(out)};
  if (p * q == 0) return 0;
  if (q > 1) {
    k.blocks = (q + COLS - 1) / COLS;
    dp_cpu_parallel_for(p * k.blocks, DP_GRAIN_MEMORY / (r * (q < COLS ? q : COLS) + 1) + 1, 1, sum_sq_cols, &k);
    return 0;
  }
  k.chunks = r > 0 ? (r + CHUNK - 1) / CHUNK : 1;
  if (k.chunks > 1 && !(k.out = malloc(sizeof(double) * (size_t)(p * k.chunks))))
    return dp_error("sum_squares: out of memory for %lld chunks", (long long)(p * k.chunks));
  dp_cpu_parallel_for(p * k.chunks, DP_GRAIN_MEMORY / (r < CHUNK ? r + 1 : CHUNK) + 1, 1, sum_sq_chunks, &k);
  if (k.chunks > 1) {
    double *o = dp_data(out);
    for (int64_t row = 0; row < p; row++) {
      double s = 0;
      for (int64_t c = 0; c < k.chunks; c++) s += k.out[row * k.chunks + c];
      o[row] = s;
    }
    free(k.out);
  }
  return 0;
}
