/* Normalisation, optimizer and pooling kernels of cpu_vec.h, included once
 * per ISA after cpu_vec_rows_t.h; no include guard on purpose. Per-element
 * math is the shared formulas' (_v: ops/scalar_math_t.h). */

static void v_affine(float *RESTRICT y, const float *RESTRICT x, int64_t n, float mean, float scale, float bias) {
  for (int64_t i = 0; i < n; i++) y[i] = dp_bn_apply_v(x[i], mean, scale, bias);
}

/* in double, rounded once: the three terms cancel (to the eps term alone
 * when a channel has two values), and float coefficients left results
 * several ulps of the terms off (the CUDA kernel computes it so too) */
static void bn_grad_inplace(float *RESTRICT o, const float *RESTRICT x, int64_t n, double kgy, double kx, double kc) {
  for (int64_t i = 0; i < n; i++) o[i] = (float)dp_bn_grad_apply_d(o[i], x[i], kgy, kx, kc);
}
static void v_bn_grad(float *o, const float *g, const float *RESTRICT x, int64_t n, double kgy, double kx, double kc) {
  if (o == g) {
    bn_grad_inplace(o, x, n, kgy, kx, kc);
    return;
  }
  float *RESTRICT out = o;
  const float *RESTRICT in = g;
  for (int64_t i = 0; i < n; i++) out[i] = (float)dp_bn_grad_apply_d(in[i], x[i], kgy, kx, kc);
}

/* 16 float lanes added in double as a tree of halvings (a serial chain of 16 double adds costs more than a
 * 128-value row's main loop) */
static inline double ln_hsum(const dp_vf16 *v) {
  double d[DLANES];
  for (int l = 0; l < DLANES; l++) d[l] = (double)(*v)[l];
  return hsum_dlanes(d);
}
/* A layer-norm row's mean and sum of squared deviations: float lanes over
 * blocks of 1024 values, each block's lanes added in double; the
 * deviations from the mean rounded to float, corrected exactly after
 * (sum (x - m)^2 = sum (x - mf)^2 - (sum (x - mf))^2 / n) */
static void ln_moments(const float *x, int64_t n, double *mean, double *m2) {
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
    s += ln_hsum(&acc);
  }
  for (; i < n; i++) s += x[i];
  double m = s / (double)n;
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
    q += ln_hsum(&acc), d += ln_hsum(&accd);
  }
  for (; i < n; i++) {
    double e = (double)x[i] - mf;
    q += e * e, d += e;
  }
  *mean = m;
  *m2 = q - d * d / (double)n;
}

static void v_ln_row(float *RESTRICT y, const float *RESTRICT x, const float *RESTRICT w, const float *RESTRICT b,
                     int64_t n, double eps, double *mean, double *rstd) {
  double m, m2;
  ln_moments(x, n, &m, &m2);
  double is = 1.0 / sqrt((m2 > 0 ? m2 : 0) / (double)n + eps);
  *mean = m, *rstd = is;
  float fm = (float)m, fs = (float)is;
  if (w && b)
    for (int64_t j = 0; j < n; j++) y[j] = dp_ln_apply_v(x[j], fm, fs, w[j], b[j]);
  else if (w)
    for (int64_t j = 0; j < n; j++) y[j] = dp_ln_apply_v(x[j], fm, fs, w[j], 0.f);
  else if (b)
    for (int64_t j = 0; j < n; j++) y[j] = dp_ln_apply_v(x[j], fm, fs, 1.f, b[j]);
  else
    for (int64_t j = 0; j < n; j++) y[j] = dp_ln_apply_v(x[j], fm, fs, 1.f, 0.f);
}

/* per row, with g = gy * w and xhat = (x - mean) * rstd:
 * gx = rstd * (g - mean(g) - xhat * mean(g * xhat)); gw += gy * xhat; gb += gy */
static void v_ln_bwd_row(float *RESTRICT gx, double *RESTRICT gw, double *RESTRICT gb, const float *RESTRICT gy,
                         const float *RESTRICT x, const float *RESTRICT w, int64_t n, double mean, double rstd,
                         float *RESTRICT xhat) {
  float fm = (float)mean, fs = (float)rstd;
  for (int64_t j = 0; j < n; j++) xhat[j] = (x[j] - fm) * fs;
  /* sum g and sum g xhat in float lanes over blocks of 1024 values, each block's lanes added in double */
  double s = 0, sx = 0;
  int64_t j = 0;
  while (j + 16 <= n) {
    int64_t end = j + 1024 < n ? j + 1024 : n;
    dp_vf16 ag = {0}, agx = {0};
    for (; j + 16 <= end; j += 16) {
      dp_vf16 g, xh;
      VF16_LOAD(g, gy + j);
      VF16_LOAD(xh, xhat + j);
      if (w) {
        dp_vf16 wv;
        VF16_LOAD(wv, w + j);
        g *= wv;
      }
      ag += g;
      agx += g * xh;
    }
    s += ln_hsum(&ag), sx += ln_hsum(&agx);
  }
  for (; j < n; j++) {
    float g = w ? gy[j] * w[j] : gy[j];
    s += g, sx += (double)(g * xhat[j]);
  }
  float md = (float)(s / (double)n), mdx = (float)(sx / (double)n);
  if (w)
    for (int64_t i = 0; i < n; i++) gx[i] = dp_ln_grad_v(gy[i] * w[i], xhat[i], fs, md, mdx);
  else
    for (int64_t i = 0; i < n; i++) gx[i] = dp_ln_grad_v(gy[i], xhat[i], fs, md, mdx);
  if (gw)
    for (int64_t i = 0; i < n; i++) gw[i] += (double)(gy[i] * xhat[i]);
  if (gb)
    for (int64_t i = 0; i < n; i++) gb[i] += gy[i];
}

/* ---- optimizer steps: dp_sgd_update / dp_adam_update per element, with
 * the flags hoisted so each variant is one vector loop ---- */
static void v_sgd(float *RESTRICT p, const float *RESTRICT g, float *RESTRICT buf, int64_t n, const dp_vec_sgd *a) {
  const float lr = (float)a->lr, mu = (float)a->momentum, damp = (float)a->dampening, wd = (float)a->weight_decay;
  if (!buf || mu == 0.f) { /* no momentum: the buffer is not touched */
    if (wd == 0.f)
      for (int64_t i = 0; i < n; i++) p[i] -= lr * g[i];
    else
      for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
    return;
  }
  if (wd == 0.f && !a->nesterov && !a->first_step && damp == 0.f) { /* the common case */
    for (int64_t i = 0; i < n; i++) {
      float b = mu * buf[i] + g[i];
      buf[i] = b;
      p[i] -= lr * b;
    }
    return;
  }
  const int nesterov = a->nesterov, first = a->first_step;
  for (int64_t i = 0; i < n; i++) dp_sgd_update_v(&p[i], g[i], &buf[i], lr, mu, damp, wd, nesterov, first);
}

/* the step's coefficients in double (dp_adam_coefs), rounded to float per
 * element as the float formula reads them; vmax: amsgrad's running max */
static void v_adam(float *RESTRICT p, const float *RESTRICT g, float *RESTRICT m, float *RESTRICT v,
                   float *RESTRICT vmax, int64_t n, const dp_adam_k *a) {
  const dp_adam_k k = *a;
  if (vmax)
    for (int64_t i = 0; i < n; i++) dp_adam_update_v(&p[i], g[i], &m[i], &v[i], &vmax[i], &k);
  else
    for (int64_t i = 0; i < n; i++) dp_adam_update_v(&p[i], g[i], &m[i], &v[i], NULL, &k);
}

static bool v_unscale(float *g, int64_t n, float s) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    float v = g[i] * s;
    g[i] = v;
    bad |= !(v - v == 0.f); /* inf - inf and NaN - NaN are NaN */
  }
  return bad != 0;
}

/* ---- pooling, one plane at a time; windows are dp_window_range's ---- */

enum { POOL_COLS_MAX = 1024 }; /* wider outputs are cut in column blocks (or, for 2x2 max, take the general loop) */

/* Output columns [*lo, *hi) whose input column ox * sw - pw + kj is inside
 * a row of w. */
static void pool_cols(int64_t w, int64_t ow, int64_t kj, int64_t sw, int64_t pw, int64_t *lo, int64_t *hi) {
  int64_t a = dp_ceil_div(pw - kj, sw), b = dp_ceil_div(w + pw - kj, sw);
  *lo = a < 0 ? 0 : a > ow ? ow : a;
  *hi = b < *lo ? *lo : b > ow ? ow : b;
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* One output row of the 2x2 / 2 max pool, 16 columns per step with the
 * last step masked (rows of 14 or 7 outputs are common): the pairs of
 * each input row split into even and odd columns by two permutes, then
 * the same four-candidate selects as the portable loop. */
static void max2x2_row_avx512(float *yo, int64_t *io, const float *r0, const float *r1, int64_t ow, int64_t base,
                              int32_t w) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lane2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
    int n = (int)(ow - ox0 < 16 ? ow - ox0 : 16);
    __mmask16 mo = (__mmask16)((1u << n) - 1u);
    __mmask16 ml = (__mmask16)(n >= 8 ? 0xFFFFu : (1u << (2 * n)) - 1u);
    __mmask16 mh = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1u : 0u);
    const float *p0 = r0 + 2 * ox0, *p1 = r1 + 2 * ox0;
    __m512 u0 = _mm512_maskz_loadu_ps(ml, p0), u1 = _mm512_maskz_loadu_ps(mh, p0 + 16);
    __m512 v0 = _mm512_maskz_loadu_ps(ml, p1), v1 = _mm512_maskz_loadu_ps(mh, p1 + 16);
    __m512 cand[4] = {_mm512_permutex2var_ps(u0, even, u1), _mm512_permutex2var_ps(u0, odd, u1),
                      _mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1)};
    const int32_t off[4] = {0, 1, w, w + 1};
    __m512 m = cand[0];
    __m512i k = _mm512_setzero_si512();
    for (int q = 1; q < 4; q++) {
      __m512 c = cand[q];
      /* the last NaN of the window wins, as PyTorch's val > max || isnan(val) */
      __mmask16 take = _mm512_cmp_ps_mask(c, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
      m = _mm512_mask_mov_ps(m, take, c);
      k = _mm512_mask_mov_epi32(k, take, _mm512_set1_epi32(off[q]));
    }
    _mm512_mask_storeu_ps(yo + ox0, mo, m);
    __m512i rel = _mm512_add_epi32(k, lane2); /* 2 * lane + the winner's offset */
    __m512i b = _mm512_set1_epi64(base + 2 * ox0);
    __m512i lo = _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(rel)));
    __m512i hi = _mm512_add_epi64(b, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(rel, 1)));
    _mm512_mask_storeu_epi64(io + ox0, (__mmask8)(mo & 0xFF), lo);
    _mm512_mask_storeu_epi64(io + ox0 + 8, (__mmask8)(mo >> 8), hi);
  }
}
#endif

static void v_max_pool_plane(float *RESTRICT y, int64_t *RESTRICT idx, const float *RESTRICT x, int64_t h, int64_t w,
                             int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                             int64_t pw) {
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * oh <= h && 2 * ow <= w &&
      ow <= POOL_COLS_MAX) {
    /* the common 2x2 / 2 window: four candidates in the window's order,
     * the winner's offset in int32 beside the float (one vector width),
     * then widened into positions */
    int32_t kk[POOL_COLS_MAX];
    const int32_t w32 = (int32_t)w;
    for (int64_t oy = 0; oy < oh; oy++) {
      const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
      float *yo = y + oy * ow;
#if defined(__AVX512F__)
      max2x2_row_avx512(yo, idx + oy * ow, r0, r1, ow, 2 * oy * w, w32);
      continue;
#endif
      for (int64_t ox = 0; ox < ow; ox++) {
        float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
        float m = a;
        int32_t k = 0;
        int tb = b > m || b != b;
        m = tb ? b : m, k = tb ? 1 : k;
        int tc = c > m || c != c;
        m = tc ? c : m, k = tc ? w32 : k;
        int td = d > m || d != d;
        m = td ? d : m, k = td ? w32 + 1 : k;
        yo[ox] = m;
        kk[ox] = k;
      }
      int64_t *io = idx + oy * ow, base = 2 * oy * w;
      for (int64_t ox = 0; ox < ow; ox++) io[ox] = base + 2 * ox + kk[ox];
    }
    return;
  }
  for (int64_t oy = 0; oy < oh; oy++) {
    int64_t y0, y1;
    dp_window_range(oy, h, kh, sh, ph, &y0, &y1);
    float *yo = y + oy * ow;
    int64_t *io = idx + oy * ow;
    for (int64_t ox = 0; ox < ow; ox++) yo[ox] = -INFINITY, io[ox] = -1;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t kj = 0; kj < kw; kj++) {
        int64_t lo, hi;
        pool_cols(w, ow, kj, sw, pw, &lo, &hi);
        const float *src = x + iy * w - pw + kj; /* src[ox * sw] is column ox * sw - pw + kj */
        int64_t pos = iy * w - pw + kj;
        for (int64_t ox = lo; ox < hi; ox++) {
          float v = src[ox * sw], b = yo[ox];
          int take = v > b || v != v || io[ox] < 0; /* the last NaN wins, as PyTorch */
          yo[ox] = take ? v : b;
          io[ox] = take ? pos + ox * sw : io[ox];
        }
      }
  }
}

/* Each output column's factor of the divisor along w (the padded or the
 * valid width of its window; 1 under an override) and the row's along h:
 * the divisor is their product (dp_avgpool_div's modes). */
static void avg_col_counts(float *cnt, int64_t c0, int64_t nc, int64_t w, int64_t kw, int64_t sw, int64_t pw,
                           int64_t divisor) {
  for (int64_t ox = 0; ox < nc; ox++) {
    int64_t x0, x1, padded = dp_window_range(c0 + ox, w, kw, sw, pw, &x0, &x1);
    cnt[ox] = (float)dp_avgpool_div(divisor > 0 ? 1 : divisor, padded, x1 - x0);
  }
}
static float avg_row_count(int64_t oy, int64_t h, int64_t kh, int64_t sh, int64_t ph, int64_t divisor, int64_t *y0,
                           int64_t *y1) {
  int64_t padded = dp_window_range(oy, h, kh, sh, ph, y0, y1);
  return (float)dp_avgpool_div(divisor, padded, *y1 - *y0);
}

static void v_avg_pool_plane(float *RESTRICT y, const float *RESTRICT x, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t divisor) {
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * oh <= h && 2 * ow <= w) {
    const float d = divisor > 0 ? (float)divisor : 4.0f; /* whole windows: padded = valid = 4 */
    for (int64_t oy = 0; oy < oh; oy++) {
      const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
      float *yo = y + oy * ow;
      for (int64_t ox = 0; ox < ow; ox++)
        yo[ox] = (r0[2 * ox] + r0[2 * ox + 1] + r1[2 * ox] + r1[2 * ox + 1]) / d; /* the window's order */
    }
    return;
  }
  float cnt[POOL_COLS_MAX];
  for (int64_t c0 = 0; c0 < ow; c0 += POOL_COLS_MAX) {
    int64_t nc = ow - c0 < POOL_COLS_MAX ? ow - c0 : POOL_COLS_MAX;
    avg_col_counts(cnt, c0, nc, w, kw, sw, pw, divisor);
    for (int64_t oy = 0; oy < oh; oy++) {
      int64_t y0, y1;
      float dh = avg_row_count(oy, h, kh, sh, ph, divisor, &y0, &y1);
      float *yo = y + oy * ow + c0;
      for (int64_t ox = 0; ox < nc; ox++) yo[ox] = 0.f;
      for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t kj = 0; kj < kw; kj++) {
          int64_t lo, hi;
          pool_cols(w, ow, kj, sw, pw, &lo, &hi);
          lo = lo < c0 ? c0 : lo, hi = hi > c0 + nc ? c0 + nc : hi;
          const float *src = x + iy * w - pw + kj;
          for (int64_t ox = lo; ox < hi; ox++) yo[ox - c0] += src[ox * sw];
        }
      for (int64_t ox = 0; ox < nc; ox++) yo[ox] = yo[ox] / (dh * cnt[ox]);
    }
  }
}

/* gx (zeroed by the caller) += each output's gradient / its divisor over
 * its window */
static void v_avg_pool_bwd_plane(float *RESTRICT gx, const float *RESTRICT gy, int64_t h, int64_t w, int64_t oh,
                                 int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                 int64_t divisor) {
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * oh <= h && 2 * ow <= w) {
    const float d = divisor > 0 ? (float)divisor : 4.0f;
    for (int64_t oy = 0; oy < oh; oy++) {
      float *r0 = gx + 2 * oy * w, *r1 = r0 + w;
      const float *go = gy + oy * ow;
      for (int64_t ox = 0; ox < ow; ox++) {
        float v = go[ox] / d;
        r0[2 * ox] += v, r0[2 * ox + 1] += v, r1[2 * ox] += v, r1[2 * ox + 1] += v;
      }
    }
    return;
  }
  float val[POOL_COLS_MAX];
  for (int64_t c0 = 0; c0 < ow; c0 += POOL_COLS_MAX) {
    int64_t nc = ow - c0 < POOL_COLS_MAX ? ow - c0 : POOL_COLS_MAX;
    float cnt[POOL_COLS_MAX];
    avg_col_counts(cnt, c0, nc, w, kw, sw, pw, divisor);
    for (int64_t oy = 0; oy < oh; oy++) {
      int64_t y0, y1;
      float dh = avg_row_count(oy, h, kh, sh, ph, divisor, &y0, &y1);
      const float *go = gy + oy * ow + c0;
      for (int64_t ox = 0; ox < nc; ox++) val[ox] = go[ox] / (dh * cnt[ox]);
      for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t kj = 0; kj < kw; kj++) {
          int64_t lo, hi;
          pool_cols(w, ow, kj, sw, pw, &lo, &hi);
          lo = lo < c0 ? c0 : lo, hi = hi > c0 + nc ? c0 + nc : hi;
          float *dst = gx + iy * w - pw + kj;
          for (int64_t ox = lo; ox < hi; ox++) dst[ox * sw] += val[ox - c0];
        }
    }
  }
}

/* CTC's step (cpu_vec.h lse3_row): branch-free, so the loop vectorises at this unit's width (doubles converted to
 * float for vmath.h's exp and log and back). One AVX-512 core, 16 utterances of 100 steps and 30 labels: 2.07 ms
 * with libm's scalar calls a state, 0.6-0.8 here, PyTorch 1.3 (its float32 kernel); the base unit 6.4 with
 * vmath.h's software FMAs. */
static void v_lse3_row(double *out, const double *a, const double *b, const double *c, const double *lp, int64_t n) {
  for (int64_t s = 0; s < n; s++) {
    double m = a[s] > b[s] ? a[s] : b[s];
    m = m > c[s] ? m : c[s];
    double mm = m == -INFINITY ? 0.0 : m; /* all -inf: the exps are 0 and the log -inf */
#if defined(__FMA__)
    float e =
        dp_vexp_nonposf((float)(a[s] - mm)) + dp_vexp_nonposf((float)(b[s] - mm)) + dp_vexp_nonposf((float)(c[s] - mm));
    out[s] = mm + (double)dp_vlogf(e) + lp[s];
#else /* without FMA vmath.h's fmaf calls are libm's software ones: libm's float exp and log are faster there */
    float e = expf((float)(a[s] - mm)) + expf((float)(b[s] - mm)) + expf((float)(c[s] - mm));
    out[s] = mm + (double)logf(e) + lp[s];
#endif
  }
}
