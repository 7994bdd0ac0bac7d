/* tostring(t): PyTorch's layout. Floats print with 4 decimals, as integers
 * with a trailing '.' when every value is whole, or in scientific notation
 * when magnitudes span more than 1e3 (or exceed 1e8 / fall below 1e-4);
 * every element is padded to one width (that of the widest nonzero finite
 * value, for floats); tensors over 1000 elements show
 * the first and last 3 entries of each dimension around "...". */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "ops/ops.h"

typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) DP_PRINTF(2, 3);
static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = b->cap * 2 + (size_t)(k > 0 ? k : 64) + 64;
    b->s = dp_xrealloc(b->s, b->cap);
  }
}

typedef struct {
  const dp_tensor *t;
  bool summarize;
  bool is_float, int_mode, sci;
  int width;
} fmt_ctx;

#define EDGE 3

static void fmt_value(const fmt_ctx *c, double v, char *out, size_t n) {
  if (!c->is_float) {
    snprintf(out, n, "%.0f", v);
    return;
  }
  if (isnan(v)) snprintf(out, n, "nan");
  else if (isinf(v)) snprintf(out, n, v > 0 ? "inf" : "-inf");
  else if (c->sci) snprintf(out, n, "%.4e", v);
  else if (c->int_mode) snprintf(out, n, "%.0f.", v);
  else snprintf(out, n, "%.4f", v);
}

static const char *elem_ptr(const dp_tensor *t, const int64_t *idx) {
  int64_t off = t->offset;
  for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
  return (const char *)t->storage->data + (size_t)off * dp_elsize(t);
}
static double elem(const dp_tensor *t, const int64_t *idx) { return dp_load_d(elem_ptr(t, idx), t->dtype); }

/* the element's text: integers exactly (int64 beyond 2^53 too) */
static void fmt_at(const fmt_ctx *c, const int64_t *idx, char *out, size_t n) {
  if (c->t->dtype == DP_I64) snprintf(out, n, "%" PRId64, *(const int64_t *)elem_ptr(c->t, idx));
  else fmt_value(c, elem(c->t, idx), out, n);
}

/* visits the elements that will be printed */
static void scan(fmt_ctx *c, int d, int64_t *idx, double *mx, double *mn, bool *all_int, bool *any_finite) {
  const dp_tensor *t = c->t;
  if (d == t->ndim) {
    double v = elem(t, idx);
    if (!isfinite(v)) return;
    *any_finite = true;
    double a = fabs(v);
    if (v != floor(v)) *all_int = false;
    if (a > *mx) *mx = a;
    if (a != 0 && a < *mn) *mn = a;
    char buf[64];
    fmt_at(c, idx, buf, sizeof buf);
    int w = (int)strlen(buf);
    if (w > c->width) c->width = w;
    return;
  }
  int64_t n = t->shape[d];
  for (int64_t i = 0; i < n; i++) {
    if (c->summarize && n > 2 * EDGE && i == EDGE) i = n - EDGE;
    idx[d] = i;
    scan(c, d + 1, idx, mx, mn, all_int, any_finite);
  }
}

/* PyTorch sizes float columns by the nonzero finite values only: nan, inf
 * and zeros are padded to that width but never widen it. */
static void widths(fmt_ctx *c, int d, int64_t *idx) {
  const dp_tensor *t = c->t;
  if (d == t->ndim) {
    char buf[64];
    double v = elem(t, idx);
    if (c->is_float && (v == 0 || !isfinite(v))) return;
    fmt_at(c, idx, buf, sizeof buf);
    int w = (int)strlen(buf);
    if (w > c->width) c->width = w;
    return;
  }
  int64_t n = t->shape[d];
  for (int64_t i = 0; i < n; i++) {
    if (c->summarize && n > 2 * EDGE && i == EDGE) i = n - EDGE;
    idx[d] = i;
    widths(c, d + 1, idx);
  }
}

static void emit(const fmt_ctx *c, sbuf *b, int d, int64_t *idx, int indent) {
  const dp_tensor *t = c->t;
  if (d == t->ndim) {
    char buf[64];
    fmt_at(c, idx, buf, sizeof buf);
    put(b, "%*s", c->width, buf);
    return;
  }
  put(b, "[");
  int64_t n = t->shape[d];
  for (int64_t i = 0; i < n; i++) {
    if (c->summarize && n > 2 * EDGE && i == EDGE) {
      if (d == t->ndim - 1) put(b, " ..., "); /* PyTorch's ' ...' entry joined by ', ' */
      else {
        put(b, "...,\n");
        for (int k = 0; k < t->ndim - d - 2; k++) put(b, "\n");
        put(b, "%*s", indent + 1, "");
      }
      i = n - EDGE;
    }
    idx[d] = i;
    emit(c, b, d + 1, idx, indent + 1);
    if (i < n - 1) {
      if (d == t->ndim - 1) put(b, ", ");
      else {
        put(b, ",\n");
        for (int k = 0; k < t->ndim - d - 2; k++) put(b, "\n");
        put(b, "%*s", indent + 1, "");
      }
    }
  }
  put(b, "]");
}

char *dp_tensor_format(const dp_tensor *t0) {
  dp_tensor *t = (dp_tensor *)t0;
  bool moved = false;
  if (dp_dev(t0).type != DP_CPU) {
    bool prev = dp_set_grad_enabled(false);
    t = dp_to((dp_tensor *)t0, t0->dtype, dp_cpu());
    dp_set_grad_enabled(prev);
    if (!t) return NULL;
    moved = true;
  }
  sbuf b = {dp_xmalloc(256), 0, 256};
  b.s[0] = 0;
  put(&b, "tensor(");
  fmt_ctx c = {.t = t, .summarize = dp_numel(t) > 1000, .is_float = dp_dtype_is_float(t->dtype)};
  int64_t idx[DP_MAXDIM] = {0};
  if (dp_numel(t) == 0) {
    put(&b, "[]");
    if (t->ndim > 1) {
      put(&b, ", size=(");
      for (int d = 0; d < t->ndim; d++) put(&b, d ? ", %" PRId64 : "%" PRId64, t->shape[d]);
      put(&b, ")");
    }
  } else {
    double mx = 0, mn = INFINITY;
    bool all_int = true, any_finite = false;
    c.width = 0;
    scan(&c, 0, idx, &mx, &mn, &all_int, &any_finite);
    if (c.is_float) {
      c.int_mode = all_int && any_finite;
      if (any_finite && !c.int_mode) c.sci = (mn != INFINITY && mx / mn > 1000.0) || mx > 1e8 || (mn < 1e-4);
      if (c.int_mode && (mx > 1e8 || (mn != INFINITY && mx / mn > 1000.0))) {
        c.int_mode = false;
        c.sci = true;
      }
      c.width = 1;
      widths(&c, 0, idx);
    }
    emit(&c, &b, 0, idx, 7);
  }
  if (t->dtype != DP_F32 && t->dtype != DP_I64) put(&b, ", dtype=%s", dp_dtype_name(t->dtype));
  if (moved) {
    char dev[16];
    put(&b, ", device='%s'", dp_device_str(dp_dev(t0), dev, sizeof dev));
  }
  if (t0->grad_fn) put(&b, ", grad_fn=<%s>", t0->grad_fn->name);
  else if (t0->requires_grad) put(&b, ", requires_grad=True");
  put(&b, ")");
  if (moved) dp_release(t);
  return b.s;
}
