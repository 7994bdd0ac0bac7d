/* Row kernels and reductions of cpu_vec.h (softmax, log-softmax,
 * cross-entropy rows, sums, extremes), included once per ISA after
 * cpu_vec_ew_t.h; no include guard on purpose.
 *
 * Reductions keep LANES independent accumulators: the compiler may not
 * reorder a floating-point sum, so one accumulator is a serial chain of
 * adds; LANES of them become vector registers (several, to cover the add
 * latency). Softmax follows PyTorch's float32 kernel: exp(x - max), then a
 * scale by 1 / sum (log_softmax: x - max - log(sum)), so the result holds
 * for logits of any magnitude; the sums are accumulated in double (float32
 * terms, converted in the vector registers) as the reference does. */

enum { LANES = 64, DLANES = 16 };

/* The accumulators' horizontal reduction as a tree of halvings (each level
 * one vector operation): a serial loop over 64 lanes is a chain of 64
 * dependent operations, which costs more than the whole row's main loop
 * at the short rows of a cross-entropy or an attention softmax. */
/* Written with vector types so the levels stay in registers: as loops over the array each level stored the
 * lanes and read them back at half the width, a store-forwarding stall per level (perf: a third of a
 * 64 x 10 cross-entropy's row). The same pairs in the same order, so the same bits. */
typedef float dp_rows_v16f __attribute__((vector_size(64), aligned(4)));
typedef float dp_rows_v8f __attribute__((vector_size(32)));
typedef float dp_rows_v4f __attribute__((vector_size(16)));
typedef int dp_rows_v16i __attribute__((vector_size(64)));
typedef int dp_rows_v8i __attribute__((vector_size(32)));
typedef int dp_rows_v4i __attribute__((vector_size(16)));
typedef double dp_rows_v8d __attribute__((vector_size(64), aligned(8)));
typedef float dp_rows_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef double dp_rows_v4d __attribute__((vector_size(32)));
typedef double dp_rows_v2d __attribute__((vector_size(16)));
/* b > a ? b : a, lane by lane (NaN in b: a) */
#define ROWS_VMAX(VF, VI, a, b) ((VF)(((VI)(b) & ((b) > (a))) | ((VI)(a) & ~((b) > (a)))))
static inline float hmax_lanes(float *acc) {
  _Static_assert(LANES == 64, "the tree below has 64 lanes");
  dp_rows_v16f q[4];
  memcpy(q, acc, sizeof q);
  dp_rows_v16f h0 = ROWS_VMAX(dp_rows_v16f, dp_rows_v16i, q[0], q[2]); /* lanes l and l + 32 */
  dp_rows_v16f h1 = ROWS_VMAX(dp_rows_v16f, dp_rows_v16i, q[1], q[3]);
  dp_rows_v16f w16 = ROWS_VMAX(dp_rows_v16f, dp_rows_v16i, h0, h1); /* l and l + 16 */
  dp_rows_v8f lo8 = __builtin_shufflevector(w16, w16, 0, 1, 2, 3, 4, 5, 6, 7);
  dp_rows_v8f hi8 = __builtin_shufflevector(w16, w16, 8, 9, 10, 11, 12, 13, 14, 15);
  dp_rows_v8f w8 = ROWS_VMAX(dp_rows_v8f, dp_rows_v8i, lo8, hi8);
  dp_rows_v4f lo4 = __builtin_shufflevector(w8, w8, 0, 1, 2, 3), hi4 = __builtin_shufflevector(w8, w8, 4, 5, 6, 7);
  dp_rows_v4f w4 = ROWS_VMAX(dp_rows_v4f, dp_rows_v4i, lo4, hi4);
  float a0 = w4[2] > w4[0] ? w4[2] : w4[0], a1 = w4[3] > w4[1] ? w4[3] : w4[1];
  return a1 > a0 ? a1 : a0;
}
#undef ROWS_VMAX
static inline double hsum_dlanes(double *acc) {
  _Static_assert(DLANES == 16, "the tree below has 16 lanes");
  dp_rows_v8d q[2];
  memcpy(q, acc, sizeof q);
  dp_rows_v8d w8 = q[0] + q[1]; /* lanes l and l + 8 */
  dp_rows_v4d w4 = __builtin_shufflevector(w8, w8, 0, 1, 2, 3) + __builtin_shufflevector(w8, w8, 4, 5, 6, 7);
  dp_rows_v2d w2 = __builtin_shufflevector(w4, w4, 0, 1) + __builtin_shufflevector(w4, w4, 2, 3);
  return w2[0] + w2[1];
}

/* The last r < w values of a row copied into w lanes, the rest `fill` (a
 * value that leaves the reduction unchanged): the tail then runs as one
 * more vector step instead of a scalar loop, a chain of dependent adds
 * that cost more than the row itself for the short rows of a
 * cross-entropy over 10 classes. */
static inline void pad_tail(float *dst, const float *x, int64_t r, int w, float fill) {
  for (int l = 0; l < w; l++) dst[l] = l < r ? x[l] : fill;
}

/* the largest value, NaN ignored (a NaN reaches the result through the
 * exp pass); -inf for an empty row */
static float row_max(const float *x, int64_t n) {
  float acc[LANES];
  for (int l = 0; l < LANES; l++) acc[l] = -INFINITY;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  if (i < n) {
    float t[16];
    pad_tail(t, x + i, n - i, 16, -INFINITY);
    for (int l = 0; l < 16; l++) acc[l] = t[l] > acc[l] ? t[l] : acc[l];
  }
  return hmax_lanes(acc);
}

/* y[i] = exp(x[i] - m); returns the sum (in double: the terms are float32,
 * their sum keeps every bit of them); the tail's padding lanes add 0. */
static double exp_store_sum(float *y, const float *x, int64_t n, float m) {
  double acc[DLANES] = {0};
  int64_t i = 0;
  for (; i + DLANES <= n; i += DLANES)
    for (int l = 0; l < DLANES; l++) {
      float e = dp_vexp_nonposf(x[i + l] - m);
      y[i + l] = e;
      acc[l] += e;
    }
  if (i < n) {
    float t[DLANES], e[DLANES];
    pad_tail(t, x + i, n - i, DLANES, -INFINITY);
    for (int l = 0; l < DLANES; l++) {
      e[l] = dp_vexp_nonposf(t[l] - m);
      acc[l] += l < n - i ? e[l] : 0.0;
    }
    memcpy(y + i, e, sizeof(float) * (size_t)(n - i));
  }
  return hsum_dlanes(acc);
}

/* The terms are in (0, 1]: float lanes over blocks of EXP_BLOCK values (32
 * terms a lane, good to ~1e-7 of the sum), each block's lanes then added
 * in double. Converting every term to double cost as much as the exp. */
enum { EXP_BLOCK = 1024, EXP_LANES = 32 };
/* next: prefetched a cache line per 16 terms (lse_row's next), or NULL */
static inline __attribute__((always_inline)) double exp_sum_pf(const float *x, int64_t n, float m, const float *next,
                                                               const bool pf) {
  double acc[DLANES] = {0};
  int64_t i = 0;
  while (i + EXP_LANES <= n) {
    int64_t end = i + EXP_BLOCK < n ? i + EXP_BLOCK : n;
    float fa[EXP_LANES] = {0};
    for (; i + EXP_LANES <= end; i += EXP_LANES) {
      if (pf) {
        __builtin_prefetch(next + i, 0, 3);
        __builtin_prefetch(next + i + 16, 0, 3);
      }
      for (int l = 0; l < EXP_LANES; l++) fa[l] += dp_vexp_nonposf(x[i + l] - m);
    }
    for (int l = 0; l < EXP_LANES; l++) acc[l % DLANES] += fa[l];
  }
  for (; i + DLANES <= n; i += DLANES)
    for (int l = 0; l < DLANES; l++) acc[l] += dp_vexp_nonposf(x[i + l] - m);
  if (i < n) {
    float t[DLANES];
    pad_tail(t, x + i, n - i, DLANES, -INFINITY);
    for (int l = 0; l < DLANES; l++) {
      float e = dp_vexp_nonposf(t[l] - m);
      acc[l] += l < n - i ? e : 0.0f;
    }
  }
  return hsum_dlanes(acc);
}
static double exp_sum(const float *x, int64_t n, float m) { return exp_sum_pf(x, n, m, NULL, false); }

static double v_sum(const float *x, int64_t n);

/* sum of a[i] * b[i] in double */
static double ddot(const float *a, const float *b, int64_t n) {
  double acc[DLANES] = {0}, s = 0;
  int64_t i = 0;
  for (; i + DLANES <= n; i += DLANES)
    for (int l = 0; l < DLANES; l++) acc[l] += (double)a[i + l] * b[i + l];
  for (; i < n; i++) s += (double)a[i] * b[i];
  s += hsum_dlanes(acc);
  return s;
}

static void v_softmax_row(float *y, const float *x, int64_t n, bool logsm) {
  float m = row_max(x, n);
  if (logsm) {
    float ls = (float)log(exp_sum(x, n, m));
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
  } else {
    float inv = (float)(1.0 / exp_store_sum(y, x, n, m));
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
  }
}

static void v_softmax_bwd_row(float *gx, const float *gy, const float *y, int64_t n, bool logsm) {
  if (logsm) {
    float s = (float)v_sum(gy, n);
    for (int64_t i = 0; i < n; i++) gx[i] = gy[i] - dp_vexpf(y[i]) * s;
  } else {
    float d = (float)ddot(gy, y, n);
    for (int64_t i = 0; i < n; i++) gx[i] = y[i] * (gy[i] - d);
  }
}

static void v_lse_row(const float *x, int64_t n, double *mx, double *log_s, double *sum_d, const float *next) {
  float m = row_max(x, n);
  *mx = m;
  *log_s = log(next ? exp_sum_pf(x, n, m, next, true) : exp_sum(x, n, m));
  if (sum_d) { /* differences to the max: a sum of the logits themselves rounds to their magnitude */
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] - m;
    *sum_d = s;
  }
}

/* exp((x - max) - log_s): x - max is exact for the logits that matter
 * (those near the max), so logits of any magnitude keep float precision */
static void v_ce_bwd_row(float *g, const float *x, int64_t n, double mx, double log_s, double off, double sc,
                         const float *next) {
  float m = (float)mx, ls = (float)log_s, fo = (float)off, fs = (float)sc;
  int64_t i = 0;
  if (next)
    for (; i + 16 <= n; i += 16) {
      __builtin_prefetch(next + i, 0, 3);
      for (int l = 0; l < 16; l++) g[i + l] = (dp_vexp_nonposf((x[i + l] - m) - ls) - fo) * fs;
    }
  for (; i < n; i++) g[i] = (dp_vexp_nonposf((x[i] - m) - ls) - fo) * fs;
}

/* ---- double-accumulated sums ---- */
/* Each 8 floats converted straight from memory (vcvtps2pd's load form:
 * converting the halves of a 16-float register took an extract each, and
 * the conversions, not the adds, bound the loop), into four vectors of 8
 * double lanes taking turns: the 16 MB sum of the per-op table 0.26 ->
 * 0.24 ms, 256 KB in the L2 3.9 -> 3.3 us (PyTorch's float adds: 0.16 ms
 * and 2.6 us; the double lanes keep the sum float64-close). */
#if defined(__AVX512F__)
#define LOAD_V8D(x) ((dp_rows_v8d)_mm512_cvtps_pd(_mm256_loadu_ps(x)))
#else
#define LOAD_V8D(x) __builtin_convertvector(*(const dp_rows_v8f_u *)(const void *)(x), dp_rows_v8d)
#endif
static double v_sum(const float *x, int64_t n) {
  _Static_assert(DLANES == 16, "two vectors of 8 double lanes");
  dp_rows_v8d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 += LOAD_V8D(x + i), a1 += LOAD_V8D(x + i + 8);
    a2 += LOAD_V8D(x + i + 16), a3 += LOAD_V8D(x + i + 24);
  }
  a0 += a2, a1 += a3;
  for (; i + 16 <= n; i += 16) a0 += LOAD_V8D(x + i), a1 += LOAD_V8D(x + i + 8);
  if (i < n) {
    float t[DLANES];
    pad_tail(t, x + i, n - i, DLANES, 0.0f);
    a0 += LOAD_V8D(t), a1 += LOAD_V8D(t + 8);
  }
  double acc[DLANES];
  memcpy(acc, &a0, sizeof a0);
  memcpy(acc + 8, &a1, sizeof a1);
  return hsum_dlanes(acc);
}
static double v_sq_dev(const float *x, int64_t n, double m) {
  dp_rows_v8d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, d;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    d = LOAD_V8D(x + i) - m, a0 += d * d;
    d = LOAD_V8D(x + i + 8) - m, a1 += d * d;
    d = LOAD_V8D(x + i + 16) - m, a2 += d * d;
    d = LOAD_V8D(x + i + 24) - m, a3 += d * d;
  }
  a0 += a2, a1 += a3;
  for (; i + 16 <= n; i += 16) {
    d = LOAD_V8D(x + i) - m, a0 += d * d;
    d = LOAD_V8D(x + i + 8) - m, a1 += d * d;
  }
  double acc[DLANES], s = 0;
  for (; i < n; i++) s += ((double)x[i] - m) * ((double)x[i] - m);
  memcpy(acc, &a0, sizeof a0);
  memcpy(acc + 8, &a1, sizeof a1);
  return s + hsum_dlanes(acc);
}
#undef LOAD_V8D
/* sum g (x - m), and sum g in *sum_g (batch norm's backward, one row of
 * a channel): float products summed in float lanes over blocks of 1024
 * values, each block's lanes added in double (a lane's float sum of 64
 * terms is good to a few 1e-6 of the terms' size: the double version spent
 * its time converting every value); x - m taken against m rounded to
 * float, corrected exactly after: sum g (x - m) = sum g (x - mf) + (mf - m) sum g */
#ifndef DP_VF16_DEFINED
#define DP_VF16_DEFINED
/* 16 float lanes as one value (GCC vector extension: one zmm register on
 * AVX-512, two ymm on AVX2): the loops written over arrays of 16 lanes
 * were vectorised across iterations with permutes instead */
typedef float dp_vf16 __attribute__((vector_size(64)));
/* (by pointer: a 64-byte vector passed by value changes the ABI where
 * AVX-512 is off) */
#define VF16_LOAD(v, p) memcpy(&(v), (p), sizeof(dp_vf16))
static inline double vf16_hsum_d(const dp_vf16 *v) {
  double s = 0;
  for (int l = 0; l < 16; l++) s += (double)(*v)[l];
  return s;
}
#endif
static double v_dot_dev(const float *g, const float *x, int64_t n, double m, double *sum_g) {
  float mf = (float)m;
  double s = 0, sg = 0;
  int64_t i = 0;
  while (i + 16 <= n) {
    int64_t end = i + 1024 < n ? i + 1024 : n;
    dp_vf16 acc = {0}, accg = {0};
    for (; i + 16 <= end; i += 16) {
      dp_vf16 gv, xv;
      VF16_LOAD(gv, g + i);
      VF16_LOAD(xv, x + i);
      acc += gv * (xv - mf);
      accg += gv;
    }
    s += vf16_hsum_d(&acc), sg += vf16_hsum_d(&accg);
  }
  for (; i < n; i++) sg += g[i], s += (double)g[i] * ((double)x[i] - mf);
  *sum_g = sg;
  return s + ((double)mf - m) * sg;
}
/* A row's mean and sum of squared deviations (batch norm's statistics,
 * one row of a channel; the second pass reads the row from cache): float
 * lanes over blocks of 1024 values as v_dot_dev, the deviations taken
 * from the mean rounded to float and corrected exactly for it after
 * (sum (x - m)^2 = sum (x - mf)^2 - (sum (x - mf))^2 / n) */
static void v_moments(const float *x, int64_t n, double *mean, double *m2) {
  double s = 0;
  int64_t i = 0;
  while (i + 16 <= n) {
    int64_t end = i + 1024 < n ? i + 1024 : n;
    dp_vf16 acc = {0};
    for (; i + 16 <= end; i += 16) {
      dp_vf16 xv;
      VF16_LOAD(xv, x + i);
      acc += xv;
    }
    s += vf16_hsum_d(&acc);
  }
  for (; i < n; i++) s += x[i];
  double m = n > 0 ? s / (double)n : 0;
  float mf = (float)m;
  double q = 0, d = 0;
  i = 0;
  while (i + 16 <= n) {
    int64_t end = i + 1024 < n ? i + 1024 : n;
    dp_vf16 acc = {0}, accd = {0};
    for (; i + 16 <= end; i += 16) {
      dp_vf16 xv;
      VF16_LOAD(xv, x + i);
      xv -= mf;
      acc += xv * xv;
      accd += xv;
    }
    q += vf16_hsum_d(&acc), d += vf16_hsum_d(&accd);
  }
  for (; i < n; i++) {
    double e = (double)x[i] - mf;
    q += e * e, d += e;
  }
  *mean = m;
  *m2 = n > 0 ? q - d * d / (double)n : 0;
}
/* sum (x - y)^2 (y NULL: sum x^2), difference and square in float32 as
 * PyTorch's norm and mse_loss compute them (a 1e20's square is inf there
 * too), summed in float lanes over blocks of 256 values (each lane adds 16
 * squares: all of one sign, good to ~1e-6 of the block) and the blocks in
 * double */
static double v_sum_sq(const float *RESTRICT x, const float *RESTRICT y, int64_t n) {
  double s = 0;
  int64_t i = 0;
  while (i + 16 <= n) {
    int64_t end = i + 256 < n ? i + 256 : n;
    dp_vf16 acc = {0};
    for (; i + 16 <= end; i += 16) {
      dp_vf16 xv, yv = {0};
      VF16_LOAD(xv, x + i);
      if (y) VF16_LOAD(yv, y + i);
      xv -= yv;
      acc += xv * xv;
    }
    s += vf16_hsum_d(&acc);
  }
  for (; i < n; i++) {
    float d = y ? x[i] - y[i] : x[i];
    s += (double)(d * d);
  }
  return s;
}
/* acc[i] += (x[i] - y[i])^2 (y NULL: x[i]^2), the square in float32 */
static void v_col_sum_sq(double *RESTRICT acc, const float *RESTRICT x, const float *RESTRICT y, int64_t n) {
  if (!y) {
    for (int64_t i = 0; i < n; i++) acc[i] += (double)(x[i] * x[i]);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float d = x[i] - y[i];
    acc[i] += (double)(d * d);
  }
}
static void v_col_acc(double *RESTRICT acc, const float *RESTRICT x, int64_t n) {
  for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}
/* the squares in double: a float32 square overflows from 1.8e19 (var and std) */
static void v_col_sq_dev(double *RESTRICT acc, const float *RESTRICT x, const double *RESTRICT m, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double d = (double)x[i] - m[i];
    acc[i] += d * d;
  }
}
static void v_col_acc_rows(double *RESTRICT acc, const float *const *x, int rows, int64_t n) {
  if (rows == 4) { /* the common case unrolled: four row streams, acc read and written once */
    const float *RESTRICT x0 = x[0], *RESTRICT x1 = x[1], *RESTRICT x2 = x[2], *RESTRICT x3 = x[3];
    for (int64_t i = 0; i < n; i++) acc[i] = (((acc[i] + x0[i]) + x1[i]) + x2[i]) + x3[i];
    return;
  }
  for (int r = 0; r < rows; r++) v_col_acc(acc, x[r], n);
}

/* ---- extremes: first position wins ties, NaN wins ---- */
static int64_t v_arg_extreme(const float *x, int64_t n, bool want_max) {
  /* pass 1 (vectorised): the extreme ignoring NaN, and whether there is one */
  float acc[LANES];
  int nan_seen = 0;
  for (int l = 0; l < LANES; l++) acc[l] = want_max ? -INFINITY : INFINITY;
  int64_t i = 0;
  if (want_max) {
    for (; i + LANES <= n; i += LANES)
      for (int l = 0; l < LANES; l++) {
        float v = x[i + l];
        nan_seen |= v != v;
        acc[l] = v > acc[l] ? v : acc[l];
      }
  } else {
    for (; i + LANES <= n; i += LANES)
      for (int l = 0; l < LANES; l++) {
        float v = x[i + l];
        nan_seen |= v != v;
        acc[l] = v < acc[l] ? v : acc[l];
      }
  }
  if (!want_max)
    for (int l = 0; l < LANES; l++) acc[l] = -acc[l];
  float m = hmax_lanes(acc);
  if (!want_max) m = -m;
  for (; i < n; i++) {
    float v = x[i];
    nan_seen |= v != v;
    m = want_max ? (v > m ? v : m) : (v < m ? v : m);
  }
  /* pass 2: its first position, a block of LANES at a time tested without branches (a scalar search was
   * half of a min over 1M values), then the hit block element by element */
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES) {
    int hit = 0;
    if (nan_seen)
      for (int l = 0; l < LANES; l++) hit |= x[j + l] != x[j + l];
    else
      for (int l = 0; l < LANES; l++) hit |= x[j + l] == m;
    if (hit) break;
  }
  for (; j < n; j++)
    if (nan_seen ? x[j] != x[j] : x[j] == m) return j;
  return 0; /* every value is +-inf opposite to the search: the first */
}

static void v_extreme_cols(float *RESTRICT out, int64_t *RESTRICT idx, const float *RESTRICT x, int64_t k,
                           int64_t inner, bool want_max) {
  memcpy(out, x, sizeof(float) * (size_t)inner);
  if (idx) memset(idx, 0, sizeof(int64_t) * (size_t)inner);
  for (int64_t j = 1; j < k; j++) {
    const float *r = x + j * inner;
    for (int64_t i = 0; i < inner; i++) {
      float v = r[i], b = out[i];
      int take = (want_max ? v > b : v < b) || (v != v && b == b);
      out[i] = take ? v : b;
      if (idx) idx[i] = take ? j : idx[i];
    }
  }
}
