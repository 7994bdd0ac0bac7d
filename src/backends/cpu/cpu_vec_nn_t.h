/* Normalisation, optimizer and pooling kernels of cpu_vec.h, included once
 * per ISA after cpu_vec_rows_t.h; no include guard on purpose. Per-element
 * math is the shared formulas' (_v: ops/scalar_math_t.h). */

static void v_affine(float *RESTRICT y, const float *RESTRICT x, int64_t n, float scale, float shift) {
  for (int64_t i = 0; i < n; i++) y[i] = dp_bn_apply_v(x[i], scale, shift);
}

static void v_bn_grad(float *RESTRICT o, const float *RESTRICT g, const float *RESTRICT x, int64_t n, float kgy,
                      float kx, float kc) {
  for (int64_t i = 0; i < n; i++) o[i] = dp_bn_grad_apply_v(g[i], x[i], kgy, kx, kc);
}

static void v_ln_row(float *RESTRICT y, const float *RESTRICT x, const float *RESTRICT w, const float *RESTRICT b,
                     int64_t n, double eps, double *mean, double *rstd) {
  double m = v_sum(x, n) / (double)n;
  double is = 1.0 / sqrt(v_sq_dev(x, n, m) / (double)n + eps);
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
  double sg[DLANES] = {0}, sgx[DLANES] = {0}, s = 0, sx = 0;
  int64_t j = 0;
  for (; j + DLANES <= n; j += DLANES)
    for (int l = 0; l < DLANES; l++) {
      float g = w ? gy[j + l] * w[j + l] : gy[j + l];
      sg[l] += g;
      sgx[l] += (double)(g * xhat[j + l]);
    }
  for (; j < n; j++) {
    float g = w ? gy[j] * w[j] : gy[j];
    s += g, sx += (double)(g * xhat[j]);
  }
  for (int l = 0; l < DLANES; l++) s += sg[l], sx += sgx[l];
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

static void v_adam(float *RESTRICT p, const float *RESTRICT g, float *RESTRICT m, float *RESTRICT v, int64_t n,
                   const dp_vec_adam *a) {
  const float lr = (float)a->lr, b1 = (float)a->beta1, b2 = (float)a->beta2, eps = (float)a->eps;
  const float wd = (float)a->weight_decay, bc1 = (float)a->bc1, bc2 = (float)a->bc2;
  if (wd == 0.f) {
    for (int64_t i = 0; i < n; i++) dp_adam_update_v(&p[i], g[i], &m[i], &v[i], lr, b1, b2, eps, 0.f, 0, bc1, bc2);
  } else if (a->decoupled) {
    for (int64_t i = 0; i < n; i++) dp_adam_update_v(&p[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, 1, bc1, bc2);
  } else {
    for (int64_t i = 0; i < n; i++) dp_adam_update_v(&p[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, 0, bc1, bc2);
  }
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

/* Output columns [*lo, *hi) whose input column ox * sw - pw + kj is inside
 * a row of w. */
static void pool_cols(int64_t w, int64_t ow, int64_t kj, int64_t sw, int64_t pw, int64_t *lo, int64_t *hi) {
  int64_t a = dp_ceil_div(pw - kj, sw), b = dp_ceil_div(w + pw - kj, sw);
  *lo = a < 0 ? 0 : a > ow ? ow : a;
  *hi = b < *lo ? *lo : b > ow ? ow : b;
}

static void v_max_pool_plane(float *RESTRICT y, int64_t *RESTRICT idx, const float *RESTRICT x, int64_t h, int64_t w,
                             int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                             int64_t pw) {
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0) {
    /* the common 2x2 / 2 window: four candidates in the window's order */
    for (int64_t oy = 0; oy < oh; oy++) {
      const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
      float *yo = y + oy * ow;
      int64_t *io = idx + oy * ow, base = 2 * oy * w;
      for (int64_t ox = 0; ox < ow; ox++) {
        float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
        float m = a;
        int64_t k = 0;
        int tb = b > m || (b != b && m == m);
        m = tb ? b : m, k = tb ? 1 : k;
        int tc = c > m || (c != c && m == m);
        m = tc ? c : m, k = tc ? w : k;
        int td = d > m || (d != d && m == m);
        m = td ? d : m, k = td ? w + 1 : k;
        yo[ox] = m;
        io[ox] = base + 2 * ox + k;
      }
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
          int take = v > b || (v != v && b == b) || io[ox] < 0;
          yo[ox] = take ? v : b;
          io[ox] = take ? pos + ox * sw : io[ox];
        }
      }
  }
}

static void v_avg_pool_plane(float *RESTRICT y, const float *RESTRICT x, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  for (int64_t oy = 0; oy < oh; oy++) {
    int64_t y0, y1, dh = dp_window_range(oy, h, kh, sh, ph, &y0, &y1);
    float *yo = y + oy * ow;
    for (int64_t ox = 0; ox < ow; ox++) yo[ox] = 0.f;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t kj = 0; kj < kw; kj++) {
        int64_t lo, hi;
        pool_cols(w, ow, kj, sw, pw, &lo, &hi);
        const float *src = x + iy * w - pw + kj;
        for (int64_t ox = lo; ox < hi; ox++) yo[ox] += src[ox * sw];
      }
    for (int64_t ox = 0; ox < ow; ox++) {
      int64_t x0, x1, dw = dp_window_range(ox, w, kw, sw, pw, &x0, &x1);
      yo[ox] = yo[ox] / (float)(dh * dw);
    }
  }
}

/* gx (zeroed by the caller) += each output's gradient / its divisor over
 * its window */
static void v_avg_pool_bwd_plane(float *RESTRICT gx, const float *RESTRICT gy, int64_t h, int64_t w, int64_t oh,
                                 int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  for (int64_t oy = 0; oy < oh; oy++) {
    int64_t y0, y1, dh = dp_window_range(oy, h, kh, sh, ph, &y0, &y1);
    const float *go = gy + oy * ow;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t kj = 0; kj < kw; kj++) {
        int64_t lo, hi;
        pool_cols(w, ow, kj, sw, pw, &lo, &hi);
        float *dst = gx + iy * w - pw + kj;
        for (int64_t ox = lo; ox < hi; ox++) {
          int64_t x0, x1, dw = dp_window_range(ox, w, kw, sw, pw, &x0, &x1);
          dst[ox * sw] += go[ox] / (float)(dh * dw);
        }
      }
  }
}
