/* CPU kernels for where, tril/triu, gather, scatter (and scatter_add),
 * topk, cumsum and multinomial. Selections copy elements as bytes, so they
 * serve every dtype; gather and scatter walk index positions through the
 * strided plan the CUDA kernels use (ops/strided_index.h). */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_radix_sort.h"
#include "core/error.h"
#include "ops/model_math.h"
#include "ops/strided_index.h"
#include "tensor/storage.h"

#define RESTRICT __restrict__

/* ---- where ---- */
/* o[i] = c[i] ? a : b, a and b each a row (step) or one value (!step) */
#define DP_SELECT_FN(name, T)                                                                                          \
  static void name(T *RESTRICT o, const uint8_t *RESTRICT c, const T *RESTRICT a, bool a_row, const T *RESTRICT b,     \
                   bool b_row, int64_t n) {                                                                            \
    if (a_row && b_row)                                                                                                \
      for (int64_t i = 0; i < n; i++) {                                                                                \
        T x = a[i], y = b[i];                                                                                          \
        o[i] = c[i] ? x : y;                                                                                           \
      }                                                                                                                \
    else if (a_row)                                                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                                                \
        T x = a[i], y = b[0];                                                                                          \
        o[i] = c[i] ? x : y;                                                                                           \
      }                                                                                                                \
    else if (b_row)                                                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                                                \
        T x = a[0], y = b[i];                                                                                          \
        o[i] = c[i] ? x : y;                                                                                           \
      }                                                                                                                \
    else                                                                                                               \
      for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[0] : b[0];                                                       \
  }
DP_SELECT_FN(select_u16, uint16_t)
DP_SELECT_FN(select_u32, uint32_t)
DP_SELECT_FN(select_u64, uint64_t)
#undef DP_SELECT_FN

static void where_row(char *const *p, const int64_t *st, int64_t n, void *ctx) {
  size_t es = *(const size_t *)ctx;
  char *o = p[0];
  const char *c = p[1], *a = p[2], *b = p[3];
  /* values of 2, 4 or 8 bytes with a contiguous condition, each side contiguous or one value (masked_fill's
   * fill, a where against a number): both sides loaded, then selected, a blend the compiler vectorises (a
   * branch per element mispredicted on random masks: 4.8 ms a million float32, masked_fill 8.2 ms) */
  if ((es == 2 || es == 4 || es == 8) && st[0] == (int64_t)es && st[1] == 1 && (st[2] == (int64_t)es || !st[2]) &&
      (st[3] == (int64_t)es || !st[3])) {
    if (es == 2)
      select_u16((uint16_t *)o, (const uint8_t *)c, (const uint16_t *)a, st[2] != 0, (const uint16_t *)b, st[3] != 0,
                 n);
    else if (es == 4)
      select_u32((uint32_t *)o, (const uint8_t *)c, (const uint32_t *)a, st[2] != 0, (const uint32_t *)b, st[3] != 0,
                 n);
    else
      select_u64((uint64_t *)o, (const uint8_t *)c, (const uint64_t *)a, st[2] != 0, (const uint64_t *)b, st[3] != 0,
                 n);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    memcpy(o + i * st[0], *(const uint8_t *)(c + i * st[1]) ? a + i * st[2] : b + i * st[3], es);
}

int dp_cpu_where(dp_tensor *out, const dp_tensor *cond, const dp_tensor *a, const dp_tensor *b) {
  size_t es = dp_elsize(out);
  const dp_tensor *ops[4] = {out, cond, a, b};
  dp_cpu_foreach(4, ops, where_row, &es);
  return 0;
}

/* ---- tril / triu: whole runs of a row are copied or zeroed ---- */
int dp_cpu_tri(dp_tensor *out, const dp_tensor *x, int64_t rows, int64_t cols, int64_t k, bool upper) {
  size_t es = dp_elsize(x);
  int64_t batch = rows * cols != 0 ? dp_numel(x) / (rows * cols) : 0;
  const char *xp = dp_data(x);
  char *op = dp_data(out);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < rows; i++) {
      size_t row = (size_t)((b * rows + i) * cols) * es;
      /* lower keeps j <= i + k: [0, cut); upper keeps j >= i + k: [cut, cols) */
      int64_t cut = upper ? i + k : i + k + 1;
      cut = cut < 0 ? 0 : cut > cols ? cols : cut;
      size_t c = (size_t)cut * es, all = (size_t)cols * es;
      if (upper) {
        memset(op + row, 0, c);
        if (op != xp) memmove(op + row + c, xp + row + c, all - c);
      } else {
        if (op != xp) memmove(op + row, xp + row, c);
        memset(op + row + c, 0, all - c);
      }
    }
  return 0;
}

/* ---- gather / scatter ---- */

/* "(2, 3)" for linear position i of shape (1-based, as Lua counts) */
static const char *position_str(int ndim, const int64_t *shape, int64_t i, char *buf, size_t n) {
  int64_t idx[DP_MAXDIM];
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int d = 0; d < ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, d ? ", %" PRId64 : "%" PRId64, idx[d] + 1);
  if (k < n) snprintf(buf + k, n - k, ")");
  return buf;
}

static int index_error(const char *op, const dp_tensor *idx, int64_t i, int64_t v, int dim, int64_t size,
                       int64_t base) {
  char pos[DP_MAXDIM * 24 + 4];
  return dp_error("%s: index %" PRId64 " at position %s of the index (shape %s) is out of range for dimension %d of "
                  "size %" PRId64 " (expected %" PRId64 "..%" PRId64 ")",
                  op, v, position_str(idx->ndim, idx->shape, i, pos, sizeof pos),
                  dp_shape_str(idx, (char[160]){0}, 160), dim + 1, size, base, size - 1 + base);
}

/* A plan over idx's shape: operand 0 idx, 1 `other` without its dim's
 * stride (added from the index), 2 `third` (may be NULL). */
static void index_plan(dp_index_plan *p, const dp_tensor *idx, const dp_tensor *other, int dim,
                       const dp_tensor *third) {
  int64_t ost[DP_MAXDIM];
  memcpy(ost, other->stride, sizeof ost);
  ost[dim] = 0;
  const int64_t *st[3] = {idx->stride, ost, third ? third->stride : idx->stride};
  dp_index_plan_init(p, idx->ndim, idx->shape, 3, st);
}

/* The plan's last dim as an inner loop: a row's offsets once (dp_index_offsets divides per dim), then the three
 * operands step by their strides. Per element, the offsets took 22 of 30 ns of a gather of [3200, 64] rows (the
 * expanded-index gather and scatter_add that nn.EmbeddingBag and ported `x.gather(1, i.expand(...))` run). */
#define FOR_EACH_ROW(p, body)                                                                                          \
  {                                                                                                                    \
    int last = (p).ndim > 0 ? (p).ndim - 1 : 0;                                                                        \
    int64_t inner = (p).ndim > 0 ? (p).shape[last] : 1;                                                                \
    int64_t s0 = (p).stride[0][last], s1 = (p).stride[1][last], s2 = (p).stride[2][last];                              \
    for (int64_t row = 0; inner > 0 && row < (p).numel / inner; row++) {                                               \
      int64_t off[DP_IDX_MAXOPS];                                                                                      \
      dp_index_offsets(&(p), row *inner, off);                                                                         \
      for (int64_t q = 0; q < inner; q++, off[0] += s0, off[1] += s1, off[2] += s2) body                               \
    }                                                                                                                  \
  }

int dp_cpu_gather(dp_tensor *out, const dp_tensor *src, const dp_tensor *idx, int dim, int64_t base) {
  dp_index_plan p;
  index_plan(&p, idx, src, dim, out);
  size_t es = dp_elsize(src);
  const int64_t *ip = dp_data(idx);
  const char *sp = dp_data(src);
  char *op = dp_data(out);
  int64_t size = src->shape[dim], sd = src->stride[dim];
  FOR_EACH_ROW(p, {
    int64_t v = ip[off[0]];
    if (v < base || v - base >= size) /* v >= base first: no overflow */
      return index_error("gather", idx, row * inner + q, v, dim, size, base);
    int64_t j = v - base;
    if (es == 4) ((uint32_t *)(void *)op)[off[2]] = ((const uint32_t *)(const void *)sp)[off[1] + j * sd];
    else memcpy(op + (size_t)off[2] * es, sp + (size_t)(off[1] + j * sd) * es, es);
  })
  return 0;
}

int dp_cpu_scatter(dp_tensor *dst, const dp_tensor *idx, const dp_tensor *src, int dim, int64_t base, bool accumulate) {
  dp_index_plan p;
  index_plan(&p, idx, dst, dim, src);
  size_t es = dp_elsize(dst);
  const int64_t *ip = dp_data(idx);
  const char *sp = dp_data(src);
  char *dp_ = dp_data(dst);
  int64_t size = dst->shape[dim], sd = dst->stride[dim];
  const char *op = accumulate ? "scatter_add" : "scatter";
  /* every index is checked before anything is written, so a bad one leaves dst as it was */
  FOR_EACH_ROW(p, {
    int64_t v = ip[off[0]];
    if (v < base || v - base >= size) return index_error(op, idx, row * inner + q, v, dim, size, base);
  })
  FOR_EACH_ROW(p, {
    char *d = dp_ + (size_t)(off[1] + (ip[off[0]] - base) * sd) * es;
    const char *s = sp + (size_t)off[2] * es;
    if (!accumulate) memcpy(d, s, es);
    else if (dst->dtype == DP_F32) *(float *)d += *(const float *)s;
    else if (dst->dtype == DP_F64) *(double *)d += *(const double *)s;
    else if (dst->dtype == DP_I64)
      *(int64_t *)d = (int64_t)((uint64_t) * (int64_t *)d + (uint64_t) * (const int64_t *)s);
    else if (dst->dtype == DP_U8) *(uint8_t *)d = (uint8_t)(*(uint8_t *)d + *(const uint8_t *)s);
    else dp_store_d(d, dst->dtype, dp_load_d(d, dst->dtype) + dp_load_d(s, dst->dtype));
  })
  return 0;
}
#undef FOR_EACH_ROW

/* ---- topk: a heap of the k best seen so far, worst on top ---- */
typedef struct {
  double v;
  int64_t i;
} vi;

static bool worse(vi a, vi b, bool largest) { return dp_topk_before(b.v, b.i, a.v, a.i, largest); }

static void sift_down(vi *h, int64_t n, int64_t at, bool largest) {
  for (;;) {
    int64_t l = 2 * at + 1, r = l + 1, w = at;
    if (l < n && worse(h[l], h[w], largest)) w = l;
    if (r < n && worse(h[r], h[w], largest)) w = r;
    if (w == at) return;
    vi t = h[at];
    h[at] = h[w];
    h[w] = t;
    at = w;
  }
}

static void sift_up(vi *h, int64_t at, bool largest) {
  while (at > 0) {
    int64_t parent = (at - 1) / 2;
    if (!worse(h[at], h[parent], largest)) return;
    vi t = h[at];
    h[at] = h[parent];
    h[parent] = t;
    at = parent;
  }
}

typedef struct {
  dp_tensor *values, *indices;
  const dp_tensor *x;
  const dp_reduce_args *a;
  int64_t k;
  bool largest;
  atomic_bool failed; /* a task could not get its heap */
} topk_ctx;

/* a whole row's order (sort, or k past a quarter of the row): a merge sort by topk's order (worse), from runs
 * sorted by insertion; the heap's pushes and pops took 110 ns an element of a sort, qsort with the same
 * comparator 100 */
static void merge_sort(vi *a, vi *tmp, int64_t n, bool largest) {
  enum { RUN = 16 }; /* runs of 16 by insertion first: four merge passes fewer */
  for (int64_t lo = 0; lo < n; lo += RUN) {
    int64_t hi = lo + RUN < n ? lo + RUN : n;
    for (int64_t i = lo + 1; i < hi; i++) {
      vi e = a[i];
      int64_t j = i;
      for (; j > lo && worse(a[j - 1], e, largest); j--) a[j] = a[j - 1];
      a[j] = e;
    }
  }
  vi *src = a, *dst = tmp;
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo;
      while (i < mid && j < hi) dst[o++] = worse(src[i], src[j], largest) ? src[j++] : src[i++];
      while (i < mid) dst[o++] = src[i++];
      while (j < hi) dst[o++] = src[j++];
    }
    vi *t = src;
    src = dst, dst = t;
  }
  if (src != a) memcpy(a, src, sizeof *a * (size_t)n);
}

/* rows [lo, hi) of outer * inner: each a heap of its k best, or its values sorted whole */
static void topk_rows(void *vctx, int64_t lo, int64_t hi) {
  topk_ctx *c = vctx;
  const dp_tensor *x = c->x;
  int64_t n = c->a->k, inner = c->a->inner, k = c->k;
  bool largest = c->largest;
  size_t es = dp_elsize(x);
  const char *xp = dp_data(x);
  char *vp = dp_data(c->values);
  int64_t *ip = dp_data(c->indices);
  /* int64 beyond 2^53 does not survive the double of the heap and the merge sort: such rows, and every whole
   * int64 row, take the radix sort, which orders int64 exactly */
  bool whole = k > n / 4, fits = n < ((int64_t)1 << 32), i64 = x->dtype == DP_I64 && fits;
  bool radix = whole && fits && (n >= DP_RADIX_MIN_ROW || i64);
  size_t heap_bytes = radix ? 0 : sizeof(vi) * (size_t)(whole ? 2 * n : k);
  size_t radix_bytes = radix || i64 ? dp_cpu_radix_scratch_bytes(n) + sizeof(uint32_t) * (size_t)n : 0;
  /* from the caching allocator: a sort of a million values needs 24 MB, which malloc would map afresh (and fault
   * in page by page) every call: 80 ms instead of 14 for 2^20 floats */
  size_t bytes = heap_bytes > radix_bytes ? heap_bytes : radix_bytes;
  vi *h = dp_cpu_alloc(bytes);
  if (!h) {
    atomic_store(&c->failed, true);
    return;
  }
  for (int64_t row = lo; row < hi; row++) {
    int64_t o = row / inner, in = row % inner, m = 0;
    bool row_radix = radix;
    if (i64 && !row_radix) {
      const int64_t *xs = (const int64_t *)(const void *)xp + o * n * inner + in;
      const int64_t exact = (int64_t)1 << 53;
      for (int64_t j = 0; j < n && !row_radix; j++) row_radix = xs[j * inner] > exact || xs[j * inner] < -exact;
    }
    if (row_radix) {
      uint32_t *order = (uint32_t *)(void *)((char *)h + dp_cpu_radix_scratch_bytes(n));
      dp_cpu_radix_order(xp + (size_t)(o * n * inner + in) * es, x->dtype, n, inner, largest, order, h);
      for (int64_t r = 0; r < k; r++) {
        int64_t oi = (o * k + r) * inner + in;
        memcpy(vp + (size_t)oi * es, xp + (size_t)((o * n + order[r]) * inner + in) * es, es);
        ip[oi] = order[r] + c->a->base;
      }
      continue;
    }
    if (x->dtype == DP_F32 && inner == 1 && !whole && fits) { /* integer keys, blocks skipped: cpu_topk_f32.c */
      uint64_t *keys = (uint64_t *)(void *)h;
      int64_t *order = (int64_t *)(void *)(keys + k); /* (the k vi of the heap hold both) */
      dp_cpu_topk_f32_row((const float *)(const void *)xp + o * n, n, k, largest, keys, order);
      for (int64_t r = 0; r < k; r++) {
        ((float *)(void *)vp)[o * k + r] = ((const float *)(const void *)xp)[o * n + order[r]];
        ip[o * k + r] = order[r] + c->a->base;
      }
      continue;
    }
    if (whole) {
      for (int64_t j = 0; j < n; j++) {
        size_t at = (size_t)((o * n + j) * inner + in) * es;
        h[j].v = x->dtype == DP_F32 ? (double)*(const float *)(xp + at) : dp_load_d(xp + at, x->dtype), h[j].i = j;
      }
      merge_sort(h, h + n, n, largest);
      for (int64_t r = 0; r < k; r++) {
        int64_t oi = (o * k + r) * inner + in;
        memcpy(vp + (size_t)oi * es, xp + (size_t)((o * n + h[r].i) * inner + in) * es, es);
        ip[oi] = h[r].i + c->a->base;
      }
      continue;
    }
    for (int64_t j = 0; j < n; j++) {
      size_t at = (size_t)((o * n + j) * inner + in) * es;
      double v = x->dtype == DP_F32 ? (double)*(const float *)(xp + at) : dp_load_d(xp + at, x->dtype);
      vi e = {v, j};
      if (m < k) {
        h[m] = e;
        sift_up(h, m++, largest);
      } else if (!(largest ? v < h[0].v : v > h[0].v) && worse(h[0], e, largest)) {
        /* (strictly behind the worst kept: out at once, the common case; ties and NaN take worse()) */
        h[0] = e;
        sift_down(h, k, 0, largest);
      }
    }
    /* pop worst-first into the back of the output */
    for (int64_t r = k - 1; r >= 0; r--) {
      vi best = h[0];
      h[0] = h[--m];
      sift_down(h, m, 0, largest);
      int64_t oi = (o * k + r) * inner + in;
      memcpy(vp + (size_t)oi * es, xp + (size_t)((o * n + best.i) * inner + in) * es, es);
      ip[oi] = best.i + c->a->base;
    }
  }
  dp_cpu_free(h, bytes);
}

int dp_cpu_topk(dp_tensor *values, dp_tensor *indices, const dp_tensor *x, const dp_reduce_args *a, int64_t k,
                bool largest) {
  int64_t rows = a->outer * a->inner;
  if (k == 0 || rows == 0) return 0;
  topk_ctx c = {.values = values, .indices = indices, .x = x, .a = a, .k = k, .largest = largest};
  atomic_init(&c.failed, false);
  dp_cpu_parallel_for(rows, DP_GRAIN_MEMORY / (a->k > 0 ? a->k : 1) + 1, 1, topk_rows, &c);
  return atomic_load(&c.failed) ? dp_error("topk: out of memory for the %lld values of a row", (long long)a->k) : 0;
}

/* ---- cummax / cummin: int64 compared exactly, float32 without widening, the rest as doubles ---- */
#define DP_CUM_EXTREME_LINE(T, TAKES)                                                                                  \
  {                                                                                                                    \
    const T *xs = (const T *)(const void *)xp;                                                                         \
    T *vs = (T *)vp;                                                                                                   \
    size_t at = (size_t)(o * n * inner + in);                                                                          \
    T cur = xs[at];                                                                                                    \
    int64_t best = 0;                                                                                                  \
    ip[at] = base;                                                                                                     \
    if (vs) vs[at] = cur;                                                                                              \
    for (int64_t j = 1; j < n; j++) {                                                                                  \
      at += (size_t)inner;                                                                                             \
      T v = xs[at];                                                                                                    \
      if (TAKES) cur = v, best = j;                                                                                    \
      ip[at] = best + base;                                                                                            \
      if (vs) vs[at] = cur;                                                                                            \
    }                                                                                                                  \
  }

int dp_cpu_cum_extreme(dp_tensor *values, dp_tensor *idx, const dp_tensor *x, const dp_reduce_args *a, bool is_max) {
  int64_t outer = a->outer, n = a->k, inner = a->inner, base = a->base;
  const char *xp = dp_data(x);
  void *vp = values ? dp_data(values) : NULL;
  int64_t *ip = dp_data(idx);
  size_t es = dp_elsize(x);
  if (n == 0) return 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      if (x->dtype == DP_I64) DP_CUM_EXTREME_LINE(int64_t, is_max ? v >= cur : v <= cur)
      else if (x->dtype == DP_F32) DP_CUM_EXTREME_LINE(float, dp_cum_extreme_takes(v, cur, is_max))
      else {
        size_t at = (size_t)(o * n * inner + in), best_at = at;
        double cur = dp_load_d(xp + at * es, x->dtype);
        int64_t best = 0;
        ip[at] = base;
        if (vp) memcpy((char *)vp + at * es, xp + at * es, es);
        for (int64_t j = 1; j < n; j++) {
          at += (size_t)inner;
          double v = dp_load_d(xp + at * es, x->dtype);
          if (dp_cum_extreme_takes(v, cur, is_max)) cur = v, best = j, best_at = at;
          ip[at] = best + base;
          if (vp) memcpy((char *)vp + at * es, xp + best_at * es, es);
        }
      }
    }
  return 0;
}
#undef DP_CUM_EXTREME_LINE

/* ---- multinomial ---- */
int dp_cpu_multinomial(dp_tensor *out, dp_tensor *w, const dp_tensor *u, int64_t rows, int64_t cats, int64_t n,
                       bool replacement, int64_t base) {
  double *wp = dp_data(w);
  const double *up = dp_data(u);
  int64_t *op = dp_data(out);
  for (int64_t r = 0; r < rows; r++)
    dp_multinomial_row(wp + r * cats, cats, up + r * n, n, replacement, base, op + r * n);
  return 0;
}
