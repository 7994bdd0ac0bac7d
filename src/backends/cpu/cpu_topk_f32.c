/* topk of one contiguous float32 row for a k below a quarter of it (the
 * heap path of cpu_index.c's topk_rows), in dp_topk_before's order.
 *
 * Why a kernel of its own: the double heap of topk_rows branches on NaN and
 * ties in every comparison (1.9 ms for the 5 largest of each row of a
 * [1024, 1024] tensor, PyTorch 1.7). Here each candidate is one 64-bit key,
 * larger meaning better: the value's order-preserving bits (as the radix
 * sort's, inverted for the smallest) above the position's complement (the
 * earlier of equal values wins), so the heap compares integers. And most
 * of a row never reaches the heap: blocks of 16 are compared with the worst
 * kept value in four SSE compares, and only the candidates' bits of the
 * mask are walked. */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_radix_sort.h"

#include <immintrin.h> /* SSE2: x86-64's baseline */

static inline uint64_t key_of(float v, int64_t j, bool largest) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  uint32_t k = dp_f32_order_key(u);
  if (!largest) k = ~k;
  return (uint64_t)k << 32 | (uint64_t)(0xffffffffu - (uint32_t)j);
}

static inline int64_t pos_of(uint64_t key) { return (int64_t)(0xffffffffu - (uint32_t)key); }

/* h: a min-heap of m keys (the worst kept on top) */
static void sift_down(uint64_t *h, int64_t m, int64_t at) {
  for (;;) {
    int64_t l = 2 * at + 1, r = l + 1, w = at;
    if (l < m && h[l] < h[w]) w = l;
    if (r < m && h[r] < h[w]) w = r;
    if (w == at) return;
    uint64_t t = h[at];
    h[at] = h[w], h[w] = t;
    at = w;
  }
}

static void sift_up(uint64_t *h, int64_t at) {
  while (at > 0) {
    int64_t p = (at - 1) / 2;
    if (h[p] <= h[at]) return;
    uint64_t t = h[at];
    h[at] = h[p], h[p] = t;
    at = p;
  }
}

void dp_cpu_topk_f32_row(const float *x, int64_t n, int64_t k, bool largest, uint64_t *h, int64_t *order) {
  for (int64_t j = 0; j < k; j++) {
    h[j] = key_of(x[j], j, largest);
    sift_up(h, j);
  }
  float t = x[pos_of(h[0])]; /* the worst kept value: a later value not at least as good cannot enter */
  int64_t j = k;
  for (; j + 16 <= n; j += 16) {
    /* the block's candidates as a bit mask (four SSE compares); a NaN kept among the smallest: all are */
    unsigned mask = 0xffffu;
    if (largest || t == t) {
      __m128 tv = _mm_set1_ps(t);
      mask = 0;
      for (int q = 0; q < 4; q++) {
        __m128 v = _mm_loadu_ps(x + j + 4 * q);
        __m128 hit = largest ? _mm_or_ps(_mm_cmpge_ps(v, tv), _mm_cmpunord_ps(v, v)) : _mm_cmple_ps(v, tv);
        mask |= (unsigned)_mm_movemask_ps(hit) << (4 * q);
      }
    }
    while (mask) { /* (t may improve within the block: the key decides) */
      int64_t e = j + __builtin_ctz(mask);
      mask &= mask - 1;
      uint64_t key = key_of(x[e], e, largest);
      if (key > h[0]) {
        h[0] = key;
        sift_down(h, k, 0);
        t = x[pos_of(h[0])];
      }
    }
  }
  for (; j < n; j++) {
    uint64_t key = key_of(x[j], j, largest);
    if (key > h[0]) {
      h[0] = key;
      sift_down(h, k, 0);
      t = x[pos_of(h[0])];
    }
  }
  for (int64_t r = k - 1, m = k; r >= 0; r--) { /* the worst first, into the back */
    order[r] = pos_of(h[0]);
    h[0] = h[--m];
    sift_down(h, m, 0);
  }
}
