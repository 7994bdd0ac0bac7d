/* LSD radix sort of one row into its stable order (contract in
 * cpu_radix_sort.h). Each value becomes an unsigned key whose order is the
 * values' order: a float's bits with the sign folded (negatives inverted,
 * positives given the top bit), every NaN one key above +inf, -0 made +0;
 * an int64's bits with the sign bit flipped; descending inverts the key.
 * Then one pass counts every byte of every key, and each byte, least
 * significant first, is a stable counting pass; a byte that is the same in
 * every key is skipped (a float32 key has four bytes, an int64 of small
 * values one or two that vary). Keys of up to 32 bits travel with their
 * position in one 64-bit word; 64-bit keys beside a separate position array.
 * Why: the merge sort's comparisons branch unpredictably on random data
 * (156 ms for a million floats, PyTorch 110); these passes don't branch. */
#include "backends/cpu/cpu_radix_sort.h"

#include <string.h>

#include "tensor/dtype.h"

size_t dp_cpu_radix_scratch_bytes(int64_t n) { return (size_t)n * (2 * sizeof(uint64_t) + sizeof(uint32_t)) + 8; }

static inline uint64_t f64_key(uint64_t u) {
  const uint64_t sign = (uint64_t)1 << 63;
  if ((u & ~sign) > 0x7ff0000000000000ull) u = 0x7ff8000000000000ull;
  if (u == sign) u = 0;
  return (u & sign) ? ~u : u | sign;
}

/* the words of src ordered by their top 32 bits (the key; the position below it), passing between src and dst;
 * returns the buffer that holds the result */
static uint64_t *passes_packed(uint64_t *src, uint64_t *dst, int64_t n) {
  uint32_t cnt[4][256];
  memset(cnt, 0, sizeof cnt);
  for (int64_t j = 0; j < n; j++) {
    uint64_t v = src[j];
    cnt[0][(v >> 32) & 255]++, cnt[1][(v >> 40) & 255]++, cnt[2][(v >> 48) & 255]++, cnt[3][v >> 56]++;
  }
  for (int p = 0; p < 4; p++) {
    int shift = 32 + 8 * p;
    if (cnt[p][(src[0] >> shift) & 255] == (uint32_t)n) continue; /* this byte is the same in every key */
    uint32_t off[256], sum = 0;
    for (int b = 0; b < 256; b++) off[b] = sum, sum += cnt[p][b];
    for (int64_t j = 0; j < n; j++) {
      uint64_t v = src[j];
      dst[off[(v >> shift) & 255]++] = v;
    }
    uint64_t *t = src;
    src = dst, dst = t;
  }
  return src;
}

static void order_split(uint64_t *k, uint64_t *k2, uint32_t *i, uint32_t *i2, int64_t n, uint32_t *order) {
  uint32_t cnt[8][256];
  memset(cnt, 0, sizeof cnt);
  for (int64_t j = 0; j < n; j++) {
    uint64_t v = k[j];
    for (int p = 0; p < 8; p++) cnt[p][(v >> (8 * p)) & 255]++;
  }
  for (int p = 0; p < 8; p++) {
    int shift = 8 * p;
    if (cnt[p][(k[0] >> shift) & 255] == (uint32_t)n) continue;
    uint32_t off[256], sum = 0;
    for (int b = 0; b < 256; b++) off[b] = sum, sum += cnt[p][b];
    for (int64_t j = 0; j < n; j++) {
      uint32_t at = off[(k[j] >> shift) & 255]++;
      k2[at] = k[j], i2[at] = i[j];
    }
    uint64_t *tk = k;
    k = k2, k2 = tk;
    uint32_t *ti = i;
    i = i2, i2 = ti;
  }
  if (i != order) memcpy(order, i, sizeof *order * (size_t)n);
}

void dp_cpu_radix_order(const void *x, dp_dtype dt, int64_t n, int64_t stride, bool largest, uint32_t *order,
                        void *scratch) {
  uint64_t *a = scratch, *b = a + n;
  if (dt == DP_F64 || dt == DP_I64) {
    const uint64_t *u = x;
    uint64_t flip = largest ? ~(uint64_t)0 : 0;
    if (dt == DP_F64)
      for (int64_t j = 0; j < n; j++) a[j] = f64_key(u[j * stride]) ^ flip;
    else
      for (int64_t j = 0; j < n; j++) a[j] = (u[j * stride] ^ ((uint64_t)1 << 63)) ^ flip;
    for (int64_t j = 0; j < n; j++) order[j] = (uint32_t)j;
    order_split(a, b, order, (uint32_t *)(void *)(b + n), n, order);
    return;
  }
  /* keys of at most 32 bits, above the position: low bits a half float never sets are shifted out */
  uint32_t flip = largest ? ~(uint32_t)0 : 0;
  if (dt == DP_F32) {
    const uint32_t *u = x;
    for (int64_t j = 0; j < n; j++) a[j] = (uint64_t)(dp_f32_order_key(u[j * stride]) ^ flip) << 32 | (uint64_t)j;
  } else if (dt == DP_U8) {
    const uint8_t *u = x;
    for (int64_t j = 0; j < n; j++) a[j] = (uint64_t)((uint32_t)u[j * stride] ^ flip) << 32 | (uint64_t)j;
  } else { /* bfloat16, float16: their float32 bits, the low 16 (13) always zero before the fold */
    int low = dt == DP_BF16 ? 16 : 13;
    size_t es = dp_dtype_size(dt);
    for (int64_t j = 0; j < n; j++) {
      float f = (float)dp_load_d((const char *)x + (size_t)(j * stride) * es, dt);
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      a[j] = (uint64_t)((dp_f32_order_key(u) >> low) ^ flip) << 32 | (uint64_t)j;
    }
  }
  const uint64_t *r = passes_packed(a, b, n);
  for (int64_t j = 0; j < n; j++) order[j] = (uint32_t)r[j];
}
