/* The row passes of the CPU attention tiles (cpu_attention.c): the user's
 * mask and the causal cut, the lane reductions, the online softmax's rows
 * of a score tile (forward) and the weights and dS of a recomputed one
 * (backward), per instruction set. Included once, by cpu_attention.c,
 * after its tile sizes (BR, BC) and head accessors; no include guard on
 * purpose. */
/* The user's mask on one row of scores s[0..nc) for query i and keys j0..:
 * -inf where a boolean mask excludes a key, a float mask added. */
INLINE void mask_user(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t nc, float *s) {
  const dp_tensor *m = a->mask;
  int64_t off = (bh / a->b2) * m->stride[0] + (bh % a->b2) * m->stride[1] + i * m->stride[2] + j0 * m->stride[3];
  int64_t ms = m->stride[3];
  if (a->mask_bool) {
    const uint8_t *mp = (const uint8_t *)dp_data(m) + off;
    for (int64_t c = 0; c < nc; c++)
      if (!mp[c * ms]) s[c] = -INFINITY;
  } else if (m->dtype == DP_BF16) { /* widened exactly: the scores get what a float32 copy of the mask adds */
    const uint16_t *mp = (const uint16_t *)dp_data(m) + off;
    for (int64_t c = 0; c < nc; c++) s[c] += dp_bf16_to_f32(mp[c * ms]);
  } else {
    const float *mp = (const float *)dp_data(m) + off;
    for (int64_t c = 0; c < nc; c++) s[c] += mp[c * ms];
  }
}
/* the user's mask and the causal cut: -inf where a key takes no part */
INLINE void mask_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t nc, float *s) {
  if (a->mask) mask_user(a, bh, i, j0, nc, s);
  if (a->causal)
    for (int64_t c = i - j0 + 1 < 0 ? 0 : i - j0 + 1; c < nc; c++) s[c] = -INFINITY;
}
/* how many of the keys j0..j0 + w - 1 query i sees through the causal cut (all w without one) */
INLINE int64_t causal_vis(const dp_attn_args *a, int64_t i, int64_t j0, int64_t w) {
  int64_t v = a->causal ? i - j0 + 1 : w;
  return v < 0 ? 0 : v < w ? v : w;
}

/* Row reductions in 16 independent lanes: strict floating point does not
 * let the compiler reassociate a serial max or sum, so a one-accumulator
 * loop would run scalar; lanes vectorise (and combine in a fixed order). */
enum { LANES = 16 };
INLINE float row_max(const float *s, int64_t n) {
  float lane[LANES];
  for (int l = 0; l < LANES; l++) lane[l] = -INFINITY;
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) lane[l] = s[c + l] > lane[l] ? s[c + l] : lane[l];
  float mx = -INFINITY;
  for (; c < n; c++) mx = s[c] > mx ? s[c] : mx;
  for (int l = 0; l < LANES; l++) mx = lane[l] > mx ? lane[l] : mx;
  return mx;
}
/* s[c] = exp((s[c] - m) - lo): m + lo is the backward's float64 lse as two floats (s - m is exact for the scores
 * near it, Sterbenz), so the weights keep float32's precision however large the scores are */
INLINE void exp_row2(float *s, int64_t n, float m, float lo) {
  for (int64_t c = 0; c < n; c++) s[c] = dp_attn_exp((s[c] - m) - lo);
}
/* s[c] = exp(s[c] - m); returns their sum */
INLINE float exp_row(float *s, int64_t n, float m) {
  float lane[LANES] = {0};
  int64_t c = 0;
  for (; c + LANES <= n; c += LANES)
    for (int l = 0; l < LANES; l++) {
      float p = dp_attn_exp(s[c + l] - m);
      s[c + l] = p;
      lane[l] += p;
    }
  float sum = 0;
  for (; c < n; c++) {
    s[c] = dp_attn_exp(s[c] - m);
    sum += s[c];
  }
  /* the lanes combined pairwise (depth 4, and in vector halves) rather than one serial chain of 16 adds */
  for (int w = LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return sum + lane[0];
}

/* Dropout of a row of weights in place (keep[c] records the mask for the
 * backward's second use). */
INLINE void dropout_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t nc, float *p, uint8_t *keep) {
  float inv = (float)(1.0 / (1.0 - a->dropout_p)), pf = (float)a->dropout_p;
  uint64_t e0 = (uint64_t)((bh * a->L + i) * a->S + j0);
  for (int64_t c = 0; c < nc; c++) {
    bool k = dp_attn_keep(a->seed, a->offset, e0 + (uint64_t)c, pf);
    if (keep) keep[c] = k;
    p[c] = k ? p[c] * inv : 0.0f;
  }
}

/* The causal cut in strips of SR rows (queries) and SR keys: a tile on the
 * diagonal computes, for each strip of its rows, only the keys up to the
 * strip's last query (strip_cols), and the reductions over rows (dV, dK)
 * start, for each strip of keys, at the first row that sees them
 * (strip_row0): what is skipped is exactly 0 (masked weights), so the
 * results are those of the whole tiles, with about 40% less of a diagonal
 * tile's work. Tiles start at multiples of SR, so a strip's first row
 * and first key are SR-aligned against each other. */
enum { SR = 16 };
_Static_assert(BR % SR == 0 && BC % SR == 0, "tiles are whole strips");
INLINE int64_t strip_cols(const dp_attn_args *a, int64_t i0, int64_t r0, int64_t j0, int64_t nc) {
  if (!a->causal) return nc;
  int64_t w = i0 + r0 + SR - j0; /* keys j <= i: the strip's last query is i0 + r0 + SR - 1 */
  return w < 0 ? 0 : w < nc ? w : nc;
}
INLINE int64_t strip_row0(const dp_attn_args *a, int64_t i0, int64_t c0, int64_t j0) {
  if (!a->causal) return 0;
  int64_t r = j0 + c0 - i0; /* rows before it have zero weight for keys c0..c0 + SR - 1 */
  return r < 0 ? 0 : r;
}

/* ---- float32 forward: the softmax rows of one score tile ----
 * Sb's rows (keys j0..j0 + nc - 1 of queries i0..i0 + nr - 1) become the
 * weights exp(s - m) (0 where masked) of the online softmax, folding into
 * each row's running maximum m, sum l and output accumulator acc. */
typedef void (*fwd_rows_fn)(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                            float *Sb, float *m, float *l, float *acc);
/* the fold of one row's new maximum and sum (mx, sum over its weights s[0..w)) */
INLINE void fold_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t w, float *s, float *m, float *l,
                     float *acc, float alpha, float mnew, float sum) {
  *l = *l * alpha + sum;
  *m = mnew;
  if (alpha != 1.0f && j0 > 0) /* the first key block's P V writes acc rather than adding to it */
    for (int64_t e = 0; e < a->Ev; e++) acc[e] *= alpha;
  if (a->dropout_p > 0) dropout_row(a, bh, i, j0, w, s, NULL);
}
/* any instruction set: the scalar row loops, vectorised by the compiler where it can */
INLINE void fwd_rows_body(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc, float *Sb,
                          float *m, float *l, float *acc) {
  const int64_t Ev = a->Ev;
  for (int64_t r = 0; r < nr; r++) {
    float *s = Sb + r * BC;
    int64_t w = strip_cols(a, i0, r / SR * SR, j0, nc);
    if (!w) continue;
    mask_row(a, bh, i0 + r, j0, w, s);
    float mx = row_max(s, w);
    float mnew = mx > m[r] ? mx : m[r];
    if (mnew == -INFINITY) { /* no key so far: contributes nothing */
      for (int64_t c = 0; c < w; c++) s[c] = 0.0f;
      continue;
    }
    float sum = exp_row(s, w, mnew);
    fold_row(a, bh, i0 + r, j0, w, s, m + r, l + r, acc + r * Ev, dp_attn_exp(m[r] - mnew), mnew, sum);
  }
}
TARGET_AVX2 static void fwd_rows_avx2(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                                      float *Sb, float *m, float *l, float *acc) {
  fwd_rows_body(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
}
static void fwd_rows_plain(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc, float *Sb,
                           float *m, float *l, float *acc) {
  fwd_rows_body(a, bh, i0, nr, j0, nc, Sb, m, l, acc);
}
/* the first n of 16 lanes */
TARGET_AVX512 INLINE __mmask16 lanes16(int64_t n) {
  return (__mmask16)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u);
}
/* AVX-512: the maximum and the sum in registers, the causal cut as a lane mask, G rows of a strip at once (they
 * have the same width w): each row's loops and reductions are a chain of dependent steps, and G independent
 * chains side by side keep the vector units busy where one row at a time left them waiting (the forward's row
 * pass took 0.35 ms of the GPT example's 1.08 ms attention layer that way). */
TARGET_AVX512 INLINE void fwd_rows512(const int G, const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t w,
                                      float *s, float *m, float *l, float *acc) {
  int64_t vis[4];
  __m512 vmax[4], vm[4], vsum[4];
  float mnew[4];
  UNROLL
  for (int g = 0; g < G; g++) {
    if (a->mask) mask_user(a, bh, i + g, j0, w, s + g * BC);
    vis[g] = causal_vis(a, i + g, j0, w);
    vmax[g] = _mm512_set1_ps(-INFINITY);
  }
  for (int64_t c = 0; c < w; c += 16) { /* max(x, vmax) keeps vmax where x is NaN, as row_max does */
    UNROLL
    for (int g = 0; g < G; g++) {
      __mmask16 k = lanes16(vis[g] - c);
      vmax[g] = _mm512_mask_max_ps(vmax[g], k, _mm512_maskz_loadu_ps(k, s + g * BC + c), vmax[g]);
    }
  }
  UNROLL
  for (int g = 0; g < G; g++) {
    float mx = _mm512_reduce_max_ps(vmax[g]);
    mnew[g] = mx > m[g] ? mx : m[g];
    vm[g] = _mm512_set1_ps(mnew[g]);
    vsum[g] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < w; c += 16) {
    __mmask16 kw = lanes16(w - c);
    UNROLL
    for (int g = 0; g < G; g++) {
      /* keys past the causal cut: weight 0 */
      __m512 p =
          dp_attn_exp512_maskz(lanes16(vis[g] - c), _mm512_sub_ps(_mm512_maskz_loadu_ps(kw, s + g * BC + c), vm[g]));
      _mm512_mask_storeu_ps(s + g * BC + c, kw, p);
      vsum[g] = _mm512_add_ps(vsum[g], p);
    }
  }
  UNROLL
  for (int g = 0; g < G; g++) {
    if (mnew[g] == -INFINITY) { /* no key so far: contributes nothing */
      for (int64_t c = 0; c < w; c++) s[g * BC + c] = 0.0f;
      continue;
    }
    fold_row(a, bh, i + g, j0, w, s + g * BC, m + g, l + g, acc + g * a->Ev, dp_attn_exp(m[g] - mnew[g]), mnew[g],
             _mm512_reduce_add_ps(vsum[g]));
  }
}
TARGET_AVX512 static void fwd_rows_avx512(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0,
                                          int64_t nc, float *Sb, float *m, float *l, float *acc) {
  const int64_t Ev = a->Ev;
  for (int64_t r0 = 0; r0 < nr; r0 += SR) {
    int64_t w = strip_cols(a, i0, r0, j0, nc), r1 = nr - r0 < SR ? nr : r0 + SR, r = r0;
    if (!w) continue;
    for (; r + 4 <= r1; r += 4) fwd_rows512(4, a, bh, i0 + r, j0, w, Sb + r * BC, m + r, l + r, acc + r * Ev);
    for (; r < r1; r++) fwd_rows512(1, a, bh, i0 + r, j0, w, Sb + r * BC, m + r, l + r, acc + r * Ev);
  }
}

/* ---- float32 backward: the rows of one tile ----
 * P's rows (the recomputed scores of queries i0.. against keys j0..) become
 * the weights exp(s - lse), dS's (dZ = dO V^T) become dS = P (dZ' - D) where
 * dZ' is dZ through the dropout (whose kept weights go to Z and mask to
 * keep); gm (the mask's gradient rows of these queries and keys, row stride
 * S) receives dS. D NULL: the row term from the tile itself, D = sum P dZ' /
 * sum P (in double), for a head whose keys are all in this tile: it then agrees
 * with the rounded dZ it is subtracted from, as the composed softmax
 * backward's does (rowsum(dO O) carries O's rounding instead, which the
 * cancellation in dZ' - D multiplies by large q and k). */
typedef void (*bwd_rows_fn)(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                            const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep, float *gm);
/* the dropout's part of one row: Z = kept weights, dZ' = dZ * keep / (1 - p) */
INLINE void bwd_drop_row(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j0, int64_t w, const float *p, float *z,
                         float *d, uint8_t *keep) {
  const float inv = (float)(1.0 / (1.0 - a->dropout_p));
  memcpy(z, p, sizeof(float) * (size_t)w);
  dropout_row(a, bh, i, j0, w, z, keep);
  for (int64_t c = 0; c < w; c++) d[c] = keep[c] ? d[c] * inv : 0.0f;
}
/* sum of p[c] * d[c] over sum of p[c], c < w, in double, rounded once (0 for a row of no weight): the weights
 * recomputed as exp(s - lse) sum to 1 only to rounding, a common factor the division takes out, so a row whose
 * dZ' are all equal (identical keys and values) gets dS = 0 exactly, as rowsum(dO O) gave it. 16 partial sums
 * (two vectors of 8 doubles once vectorised; one running sum was a chain of dependent adds, 1 ms a GPT layer) */
INLINE float tile_d(const float *p, const float *d, int64_t w) {
  double t[16] = {0}, u[16] = {0};
  int64_t c = 0;
  for (; c + 16 <= w; c += 16)
    for (int k = 0; k < 16; k++) t[k] += (double)p[c + k] * (double)d[c + k], u[k] += (double)p[c + k];
  for (; c < w; c++) t[c % 16] += (double)p[c] * (double)d[c], u[c % 16] += (double)p[c];
  double sum = 0, weight = 0;
  for (int k = 0; k < 16; k++) sum += t[k], weight += u[k];
  return weight > 0 ? (float)(sum / weight) : 0.0f;
}
INLINE void bwd_rows_body(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                          const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep, float *gm) {
  for (int64_t r = 0; r < nr; r++) {
    float *p = P + r * BC, *d = dS + r * BC;
    int64_t w = strip_cols(a, i0, r / SR * SR, j0, nc);
    double li = lse[r];
    if (li == -INFINITY) { /* a row with no key: no gradient */
      for (int64_t c = 0; c < w; c++) p[c] = 0.0f;
    } else {
      mask_row(a, bh, i0 + r, j0, w, p);
      float hi = (float)li;
      exp_row2(p, w, hi, (float)(li - (double)hi));
    }
    if (a->dropout_p > 0) bwd_drop_row(a, bh, i0 + r, j0, w, p, Z + r * BC, d, keep + r * BC);
    float Di = D ? D[r] : tile_d(p, d, w);
    for (int64_t c = 0; c < w; c++) d[c] = p[c] * (d[c] - Di);
    if (gm) memcpy(gm + r * a->S, d, sizeof(float) * (size_t)w);
  }
}
TARGET_AVX2 static void bwd_rows_avx2(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                                      const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep,
                                      float *gm) {
  bwd_rows_body(a, bh, i0, nr, j0, nc, lse, D, P, Z, dS, keep, gm);
}
static void bwd_rows_plain(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                           const double *lse, const float *D, float *P, float *Z, float *dS, uint8_t *keep, float *gm) {
  bwd_rows_body(a, bh, i0, nr, j0, nc, lse, D, P, Z, dS, keep, gm);
}
/* AVX-512: the causal cut as a lane mask, and without dropout (and with D given) the weights and dS in one pass */
TARGET_AVX512 static void bwd_rows_avx512(const dp_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0,
                                          int64_t nc, const double *lse, const float *D, float *P, float *Z, float *dS,
                                          uint8_t *keep, float *gm) {
  const bool drop = a->dropout_p > 0;
  for (int64_t r = 0; r < nr; r++) {
    float *p = P + r * BC, *d = dS + r * BC;
    int64_t w = strip_cols(a, i0, r / SR * SR, j0, nc), vis = 0;
    double li = lse[r];
    float hi = 0, lo = 0;
    if (li != -INFINITY) { /* else a row with no key: weights 0, no gradient */
      if (a->mask) mask_user(a, bh, i0 + r, j0, w, p);
      vis = causal_vis(a, i0 + r, j0, w);
      hi = (float)li, lo = (float)(li - (double)hi);
    }
    const bool one_pass = !drop && D, sum_here = !drop && !D; /* sum_here: D from this pass's weights */
    const __m512 vhi = _mm512_set1_ps(hi), vlo = _mm512_set1_ps(lo), vD = _mm512_set1_ps(D ? D[r] : 0.0f);
    __m512d pd[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()}, ps[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    for (int64_t c = 0; c < w; c += 16) {
      __mmask16 kw = lanes16(w - c);
      __m512 x = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(kw, p + c), vhi), vlo);
      __m512 e = dp_attn_exp512_maskz(lanes16(vis - c), x);
      _mm512_mask_storeu_ps(p + c, kw, e);
      if (one_pass)
        _mm512_mask_storeu_ps(d + c, kw, _mm512_mul_ps(e, _mm512_sub_ps(_mm512_maskz_loadu_ps(kw, d + c), vD)));
      if (sum_here) { /* tile_d's sums, in double (lanes past w: weight 0, dZ 0) */
        __m512 dz = _mm512_maskz_loadu_ps(kw, d + c);
        __m512d e0 = _mm512_cvtps_pd(_mm512_castps512_ps256(e)), e1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1));
        pd[0] = _mm512_fmadd_pd(e0, _mm512_cvtps_pd(_mm512_castps512_ps256(dz)), pd[0]);
        pd[1] = _mm512_fmadd_pd(e1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(dz, 1)), pd[1]);
        ps[0] = _mm512_add_pd(ps[0], e0), ps[1] = _mm512_add_pd(ps[1], e1);
      }
    }
    if (!one_pass) {
      if (drop) bwd_drop_row(a, bh, i0 + r, j0, w, p, Z + r * BC, d, keep + r * BC);
      float Di;
      if (sum_here) {
        double weight = _mm512_reduce_add_pd(_mm512_add_pd(ps[0], ps[1]));
        Di = weight > 0 ? (float)(_mm512_reduce_add_pd(_mm512_add_pd(pd[0], pd[1])) / weight) : 0.0f;
      } else {
        Di = D ? D[r] : tile_d(p, d, w);
      }
      const __m512 vd = _mm512_set1_ps(Di);
      for (int64_t c = 0; c < w; c += 16) {
        __mmask16 kw = lanes16(w - c);
        __m512 e = _mm512_maskz_loadu_ps(kw, p + c);
        _mm512_mask_storeu_ps(d + c, kw, _mm512_mul_ps(e, _mm512_sub_ps(_mm512_maskz_loadu_ps(kw, d + c), vd)));
      }
    }
    if (gm) memcpy(gm + r * a->S, d, sizeof(float) * (size_t)w);
  }
}
