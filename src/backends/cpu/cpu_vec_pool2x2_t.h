/* The CNN's block after a convolution, batch norm + ReLU + 2x2 / stride 2
 * max pooling, one plane per call, for the fused op (cpu_norm_pool.c).
 * Included once per ISA after cpu_vec_nn_t.h; no include guard on purpose.
 *
 * Each value is relu(batch_norm(x)) by the formulas v_affine and v_unary
 * use (dp_bn_apply_v, dp_relu_fwd_v: the same float operations, so the same
 * bits), made in registers instead of a row in memory. A window's four
 * candidates, in max_pool2d's order, are a = (2oy, 2ox), b = (2oy, 2ox + 1),
 * c = (2oy + 1, 2ox), d = (2oy + 1, 2ox + 1); the winner is the last NaN,
 * else the first largest: max_pool2d folds them left to right with
 * take(q, p) = q > p || q is NaN, and that fold is associative, so pairing
 * (a, b) and (c, d) first picks the same element (shorter dependency chains
 * for the vector form).
 *
 * The backward writes the whole input-gradient plane of the ReLU's input:
 * max_pool2d's backward (pooled gradients added into a zeroed plane at the
 * winners: 0 + gy, so -0 becomes +0) followed by the ReLU's (gy where the
 * ReLU's output is > 0, else 0), without the scatter, the zeroing or the
 * index array. Rows and columns no window covers (odd sizes) get 0.
 * tests/spec/nn_bn_relu_pool_fused_spec.lua holds both to the unfused ops
 * bit for bit on every kernel set. */

static inline float p2_bn_relu(float x, float mean, float scale, float bias) {
  const dp_unary_params p = {0};
  return dp_relu_fwd_v(dp_bn_apply_v(x, mean, scale, bias), &p);
}
static inline bool p2_takes(float q, float p) { return q > p || q != q; }

/* Output columns [ox0, ow) of output row oy, one at a time. */
static void p2_fwd_cols(float *y, const float *r0, const float *r1, int64_t ox0, int64_t ow, float mean, float scale,
                        float bias) {
  for (int64_t ox = ox0; ox < ow; ox++) {
    float a = p2_bn_relu(r0[2 * ox], mean, scale, bias), b = p2_bn_relu(r0[2 * ox + 1], mean, scale, bias);
    float c = p2_bn_relu(r1[2 * ox], mean, scale, bias), d = p2_bn_relu(r1[2 * ox + 1], mean, scale, bias);
    float top = p2_takes(b, a) ? b : a, bot = p2_takes(d, c) ? d : c;
    y[ox] = p2_takes(bot, top) ? bot : top;
  }
}

static void p2_bwd_cols(float *g0, float *g1, const float *r0, const float *r1, const float *gy, int64_t ox0,
                        int64_t ow, float mean, float scale, float bias) {
  for (int64_t ox = ox0; ox < ow; ox++) {
    float v[4] = {p2_bn_relu(r0[2 * ox], mean, scale, bias), p2_bn_relu(r0[2 * ox + 1], mean, scale, bias),
                  p2_bn_relu(r1[2 * ox], mean, scale, bias), p2_bn_relu(r1[2 * ox + 1], mean, scale, bias)};
    bool tb = p2_takes(v[1], v[0]), td = p2_takes(v[3], v[2]);
    float top = tb ? v[1] : v[0], bot = td ? v[3] : v[2];
    int win = p2_takes(bot, top) ? (td ? 3 : 2) : (tb ? 1 : 0);
    float g = 0.0f + gy[ox];
    float o[4];
    for (int q = 0; q < 4; q++) o[q] = q == win && !(v[q] <= 0) ? g : 0.0f;
    g0[2 * ox] = o[0], g0[2 * ox + 1] = o[1], g1[2 * ox] = o[2], g1[2 * ox + 1] = o[3];
  }
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* Lane masks of a block of n <= 16 outputs: the outputs, and the 2n inputs
 * of a row split over two vectors. */
typedef struct {
  __mmask16 out, lo, hi;
} p2_masks;
static inline p2_masks p2_masks_of(int64_t n) {
  p2_masks m;
  m.out = (__mmask16)((1u << n) - 1u);
  m.lo = (__mmask16)(n >= 8 ? 0xFFFFu : (1u << (2 * n)) - 1u);
  m.hi = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1u : 0u);
  return m;
}
static inline __m512 p2_bn_relu16(__m512 x, __m512 mean, __m512 scale, __m512 bias) {
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(x, mean), scale), bias);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v); /* v <= 0 ? 0 : v */
}
static inline __mmask16 p2_takes16(__m512 q, __m512 p) {
  return _mm512_cmp_ps_mask(q, p, _CMP_GT_OQ) | _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q);
}
/* The four candidates of 16 windows starting at column 2 * ox0 of rows r0, r1. */
static inline void p2_load4(__m512 cand[4], const float *r0, const float *r1, p2_masks m, __m512 mean, __m512 scale,
                            __m512 bias) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 u0 = _mm512_maskz_loadu_ps(m.lo, r0), u1 = _mm512_maskz_loadu_ps(m.hi, r0 + 16);
  __m512 v0 = _mm512_maskz_loadu_ps(m.lo, r1), v1 = _mm512_maskz_loadu_ps(m.hi, r1 + 16);
  cand[0] = p2_bn_relu16(_mm512_permutex2var_ps(u0, even, u1), mean, scale, bias);
  cand[1] = p2_bn_relu16(_mm512_permutex2var_ps(u0, odd, u1), mean, scale, bias);
  cand[2] = p2_bn_relu16(_mm512_permutex2var_ps(v0, even, v1), mean, scale, bias);
  cand[3] = p2_bn_relu16(_mm512_permutex2var_ps(v0, odd, v1), mean, scale, bias);
}
#endif

static void v_bn_relu_max_pool2x2(float *RESTRICT y, const float *RESTRICT x, int64_t h, int64_t w, float mean,
                                  float scale, float bias) {
  int64_t oh = h / 2, ow = w / 2;
  for (int64_t oy = 0; oy < oh; oy++) {
    const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
    float *yo = y + oy * ow;
    int64_t ox0 = 0;
#if defined(__AVX512F__)
    const __m512 vm = _mm512_set1_ps(mean), vs = _mm512_set1_ps(scale), vb = _mm512_set1_ps(bias);
    for (; ox0 < ow; ox0 += 16) {
      p2_masks m = p2_masks_of(ow - ox0 < 16 ? ow - ox0 : 16);
      __m512 c[4];
      p2_load4(c, r0 + 2 * ox0, r1 + 2 * ox0, m, vm, vs, vb);
      __m512 top = _mm512_mask_mov_ps(c[0], p2_takes16(c[1], c[0]), c[1]);
      __m512 bot = _mm512_mask_mov_ps(c[2], p2_takes16(c[3], c[2]), c[3]);
      _mm512_mask_storeu_ps(yo + ox0, m.out, _mm512_mask_mov_ps(top, p2_takes16(bot, top), bot));
    }
#endif
    p2_fwd_cols(yo, r0, r1, ox0, ow, mean, scale, bias);
  }
}

static void v_bn_relu_max_pool2x2_bwd(float *RESTRICT gx, const float *RESTRICT x, const float *RESTRICT gy, int64_t h,
                                      int64_t w, float mean, float scale, float bias) {
  int64_t oh = h / 2, ow = w / 2;
  for (int64_t oy = 0; oy < oh; oy++) {
    const float *r0 = x + 2 * oy * w, *r1 = r0 + w, *go = gy + oy * ow;
    float *g0 = gx + 2 * oy * w, *g1 = g0 + w;
    int64_t ox0 = 0;
#if defined(__AVX512F__)
    const __m512 vm = _mm512_set1_ps(mean), vs = _mm512_set1_ps(scale), vb = _mm512_set1_ps(bias);
    const __m512 zero = _mm512_setzero_ps();
    /* [a0 b0 a1 b1 ...]: the first 16 and the last 16 of two vectors interleaved */
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (; ox0 < ow; ox0 += 16) {
      p2_masks m = p2_masks_of(ow - ox0 < 16 ? ow - ox0 : 16);
      __m512 c[4];
      p2_load4(c, r0 + 2 * ox0, r1 + 2 * ox0, m, vm, vs, vb);
      __mmask16 tb = p2_takes16(c[1], c[0]), td = p2_takes16(c[3], c[2]);
      __m512 top = _mm512_mask_mov_ps(c[0], tb, c[1]), bot = _mm512_mask_mov_ps(c[2], td, c[3]);
      __mmask16 tbot = p2_takes16(bot, top);
      __mmask16 win[4] = {(__mmask16)(~tbot & ~tb), (__mmask16)(~tbot & tb), (__mmask16)(tbot & ~td),
                          (__mmask16)(tbot & td)};
      __m512 g = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(m.out, go + ox0));
      __m512 o[4];
      for (int q = 0; q < 4; q++) /* the winner, where the ReLU's output is > 0 */
        o[q] = _mm512_maskz_mov_ps(win[q] & _mm512_cmp_ps_mask(c[q], zero, _CMP_NLE_UQ), g);
      _mm512_mask_storeu_ps(g0 + 2 * ox0, m.lo, _mm512_permutex2var_ps(o[0], ilo, o[1]));
      _mm512_mask_storeu_ps(g0 + 2 * ox0 + 16, m.hi, _mm512_permutex2var_ps(o[0], ihi, o[1]));
      _mm512_mask_storeu_ps(g1 + 2 * ox0, m.lo, _mm512_permutex2var_ps(o[2], ilo, o[3]));
      _mm512_mask_storeu_ps(g1 + 2 * ox0 + 16, m.hi, _mm512_permutex2var_ps(o[2], ihi, o[3]));
    }
#endif
    p2_bwd_cols(g0, g1, r0, r1, go, ox0, ow, mean, scale, bias);
    if (w > 2 * ow) g0[w - 1] = g1[w - 1] = 0.0f;
  }
  for (int64_t i = 2 * oh * w; i < h * w; i++) gx[i] = 0.0f;
}
