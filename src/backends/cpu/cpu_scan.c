/* cumsum, cumprod and logcumsumexp on the CPU, the last two with their
 * gradients (backend cumsum and cum_scan; the scalar math is
 * ops/model_math.h's, shared with CUDA).
 *
 * A scan is serial along its line, so the kernels run several lines at a
 * time in lockstep: a few rows when the scanned dim is the last (each a
 * stream; independent multiplies hide one's latency), or neighbouring
 * columns otherwise (contiguous loads a step). Blocks of lines
 * are split among the pool's threads. Values fold in double (int64
 * products exactly, wrapping as PyTorch's); float32 and float64 have their
 * own loads, the half types go through dp_load_d. The compositions the Lua
 * side ran before: cumprod of [1024, 1024] along rows 5.5 ms (PyTorch 0.9),
 * logcumsumexp 110 (PyTorch 39). */
#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "ops/model_math.h"

/* Lines a block: rows of the last dim (each a stream of its own: 4 rows' x and out are 8 cache lines 4 KB apart
 * for [*, 1024], within an L1 set's ways; 16 rows measured 6.8 ms for [1024, 1024] against 1.1 for 4, from set
 * conflicts), or neighbouring columns of a middle dim (a step reads 64 contiguous values). */
#define SCAN_ROWS 4
#define SCAN_COLS 64
#define SCAN_LANES SCAN_COLS

typedef struct {
  char *out;
  const char *x, *g;
  dp_dtype dt;
  int64_t outer, n, inner, blocks_per_outer;
  dp_scan_kind kind;
  bool reverse;
} scan_ctx;

/* Loads and stores by dtype; dt is a constant in each caller below, so the switch folds away. */
static inline __attribute__((always_inline)) double ld(const char *p, dp_dtype dt, int64_t i) {
  if (dt == DP_F32) return ((const float *)(const void *)p)[i];
  if (dt == DP_F64) return ((const double *)(const void *)p)[i];
  return dp_load_d(p + (size_t)i * dp_dtype_size(dt), dt);
}
static inline __attribute__((always_inline)) void st(char *p, dp_dtype dt, int64_t i, double v) {
  if (dt == DP_F32) ((float *)(void *)p)[i] = (float)v;
  else if (dt == DP_F64) ((double *)(void *)p)[i] = v;
  else dp_store_d(p + (size_t)i * dp_dtype_size(dt), dt, v);
}

/* Lines first + l * ls (l < nl), steps of ss along each, folded a step at a time across the lines (nl
 * independent chains); `reverse` scans from the end (cumsum's gradient). */
static inline __attribute__((always_inline)) void scan_lines(const scan_ctx *c, dp_dtype dt, dp_scan_kind k,
                                                             int64_t first, int64_t nl, int64_t ls, int64_t ss) {
  int64_t n = c->n;
  double acc[SCAN_LANES], carry[SCAN_LANES], next[SCAN_LANES];
  for (int64_t l = 0; l < nl; l++) acc[l] = dp_scan_start(k), carry[l] = 0, next[l] = 0;
  for (int64_t s = 0; s < n; s++) {
    int64_t at0 = first + (c->reverse ? n - 1 - s : s) * ss;
    if (k == DP_SCAN_SUM)
      for (int64_t l = 0; l < nl; l++) st(c->out, dt, at0 + l * ls, acc[l] += ld(c->x, dt, at0 + l * ls));
    else if (k == DP_SCAN_PROD)
      for (int64_t l = 0; l < nl; l++) st(c->out, dt, at0 + l * ls, acc[l] *= ld(c->x, dt, at0 + l * ls));
    else
      for (int64_t l = 0; l < nl; l++) {
        double folded = dp_scan_fold(k, acc[l], ld(c->x, dt, at0 + l * ls));
        st(c->out, dt, at0 + l * ls, k == DP_SCAN_PROD_GRAD ? acc[l] : folded); /* the gradient's pass stores E */
        acc[l] = folded;
      }
  }
  if (k != DP_SCAN_PROD_GRAD && k != DP_SCAN_LOGADDEXP_GRAD) return;
  for (int64_t j = n - 1; j >= 0; j--) /* the gradients' pass back, from the end */
    for (int64_t l = 0; l < nl; l++) {
      int64_t at = first + l * ls + j * ss;
      double xv = ld(c->x, dt, at), stored = ld(c->out, dt, at);
      carry[l] = dp_scan_grad_carry(k, ld(c->g, dt, at), stored, next[l], carry[l], j == n - 1);
      st(c->out, dt, at, dp_scan_grad_value(k, xv, stored, carry[l]));
      next[l] = k == DP_SCAN_PROD_GRAD ? xv : stored;
    }
}

/* int64 products, exact (wrapping as PyTorch's): a line at a time, in order. */
static void scan_lines_i64(const scan_ctx *c, int64_t first, int64_t nl, int64_t ls, int64_t ss) {
  const int64_t *x = (const int64_t *)(const void *)c->x;
  int64_t *out = (int64_t *)(void *)c->out;
  for (int64_t l = 0; l < nl; l++) {
    uint64_t acc = 1;
    for (int64_t j = 0, at = first + l * ls; j < c->n; j++, at += ss) out[at] = (int64_t)(acc *= (uint64_t)x[at]);
  }
}

/* float32 with the kind, and for whole blocks the line count and step, as constants: unrolled rows (cumprod of
 * [1024, 1024] along rows 0.96 ms against 1.4 in the general loop), vector loops over columns. */
static inline __attribute__((always_inline)) void scan_f32(const scan_ctx *c, dp_scan_kind k, int64_t first, int64_t nl,
                                                           int64_t ls, int64_t ss) {
  if (ss == 1 && nl == SCAN_ROWS) scan_lines(c, DP_F32, k, first, SCAN_ROWS, ls, 1);
  else if (ls == 1 && nl == SCAN_COLS) scan_lines(c, DP_F32, k, first, SCAN_COLS, 1, ss);
  else scan_lines(c, DP_F32, k, first, nl, ls, ss);
}

static void scan_blocks(void *vctx, int64_t lo, int64_t hi) {
  const scan_ctx *c = vctx;
  for (int64_t b = lo; b < hi; b++) {
    int64_t first, nl, ls, ss;
    if (c->inner == 1) { /* rows */
      first = b * SCAN_ROWS * c->n, nl = c->outer - b * SCAN_ROWS, ls = c->n, ss = 1;
      if (nl > SCAN_ROWS) nl = SCAN_ROWS;
    } else { /* columns of one outer slice */
      int64_t o = b / c->blocks_per_outer, in0 = (b % c->blocks_per_outer) * SCAN_COLS;
      first = o * c->n * c->inner + in0, nl = c->inner - in0, ls = 1, ss = c->inner;
      if (nl > SCAN_COLS) nl = SCAN_COLS;
    }
    if (c->dt == DP_I64) scan_lines_i64(c, first, nl, ls, ss);
    else if (c->dt == DP_F32) {
      switch (c->kind) {
      case DP_SCAN_SUM: scan_f32(c, DP_SCAN_SUM, first, nl, ls, ss); break;
      case DP_SCAN_PROD: scan_f32(c, DP_SCAN_PROD, first, nl, ls, ss); break;
      case DP_SCAN_PROD_GRAD: scan_f32(c, DP_SCAN_PROD_GRAD, first, nl, ls, ss); break;
      case DP_SCAN_LOGADDEXP: scan_f32(c, DP_SCAN_LOGADDEXP, first, nl, ls, ss); break;
      default: scan_f32(c, DP_SCAN_LOGADDEXP_GRAD, first, nl, ls, ss); break;
      }
    } else if (c->dt == DP_F64) scan_lines(c, DP_F64, c->kind, first, nl, ls, ss);
    else scan_lines(c, c->dt, c->kind, first, nl, ls, ss);
  }
}

static int cum_scan(dp_tensor *out, const dp_tensor *x, const dp_tensor *g, const dp_reduce_args *a, dp_scan_kind kind,
                    bool reverse) {
  scan_ctx c = {.out = dp_data(out),
                .x = dp_data(x),
                .g = g ? dp_data(g) : NULL,
                .dt = x->dtype,
                .outer = a->outer,
                .n = a->k,
                .inner = a->inner,
                .blocks_per_outer = (a->inner + SCAN_COLS - 1) / SCAN_COLS,
                .kind = kind,
                .reverse = reverse};
  if (c.n == 0 || c.outer == 0 || c.inner == 0) return 0;
  int64_t blocks = c.inner == 1 ? (c.outer + SCAN_ROWS - 1) / SCAN_ROWS : c.outer * c.blocks_per_outer;
  int64_t per_block = (c.inner == 1 ? SCAN_ROWS : SCAN_COLS) * c.n * (dp_scan_is_lse(kind) ? 8 : 1);
  dp_cpu_parallel_for(blocks, DP_GRAIN_MEMORY / per_block + 1, 1, scan_blocks, &c);
  return 0;
}

int dp_cpu_cum_scan(dp_tensor *out, const dp_tensor *x, const dp_tensor *g, const dp_reduce_args *a,
                    dp_scan_kind kind) {
  return cum_scan(out, x, g, a, kind, false);
}

/* cumsum: floats through the lines above (in double, as before: a column at a time with strided loads took
 * 12.7 ms along dim 1 of [1024, 1024], PyTorch 6.1); integers summed exactly in int64, a line at a time. */
int dp_cpu_cumsum(dp_tensor *out, const dp_tensor *x, const dp_reduce_args *a, bool reverse) {
  if (dp_dtype_is_float(x->dtype) && out->dtype == x->dtype) return cum_scan(out, x, NULL, a, DP_SCAN_SUM, reverse);
  int64_t outer = a->outer, n = a->k, inner = a->inner;
  const char *xp = dp_data(x);
  int64_t *op = dp_data(out);
  size_t xs = dp_elsize(x);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t iacc = 0;
      for (int64_t s = 0; s < n; s++) {
        int64_t j = reverse ? n - 1 - s : s;
        size_t at = (size_t)((o * n + j) * inner + in);
        int64_t v =
            x->dtype == DP_I64 ? ((const int64_t *)(const void *)xp)[at] : (int64_t)dp_load_d(xp + at * xs, x->dtype);
        iacc = (int64_t)((uint64_t)iacc + (uint64_t)v);
        op[at] = iacc;
      }
    }
  return 0;
}
