/* PyTorch's type promotion (torch.result_type) for the dtypes ddplua has,
 * and the cast rule of in-place ops (torch.can_cast).
 *
 * Operands fall in three priority groups: tensors with dimensions, 0-dim
 * tensors, and Lua numbers (PyTorch's "wrapped numbers": a Python scalar
 * there). Within a group dtypes promote as usual (dp_promote); a lower
 * group changes the result only when it is of a higher category (float
 * above integer), so int64 [3] * 2.5 is float32 (the default dtype for a
 * float number), float32 [3] + float64 0-dim is float32, uint8 [3] + an
 * int64 0-dim (or the number 300) stays uint8, and int64 [3] + float64
 * 0-dim is float64 (a 0-dim tensor of the higher category brings its own
 * dtype, a number only its category). */
#include <math.h>

#include "ops/op_util.h"

typedef struct {
  dp_dtype dim, zero, wrapped;
  bool has_dim, has_zero, has_wrapped;
} rt_state;

static void rt_add(dp_dtype *acc, bool *has, dp_dtype t) {
  *acc = *has ? dp_promote(*acc, t) : t;
  *has = true;
}

static void rt_tensor(rt_state *s, const dp_tensor *t) {
  if (t->ndim == 0) rt_add(&s->zero, &s->has_zero, t->dtype);
  else rt_add(&s->dim, &s->has_dim, t->dtype);
}

static void rt_number(rt_state *s, const dp_number *v) {
  rt_add(&s->wrapped, &s->has_wrapped, v->is_int ? DP_I64 : DP_F32);
}

/* PyTorch's combine_categories: `higher` is the higher-priority group */
static dp_dtype combine(bool has_hi, dp_dtype hi, bool has_lo, dp_dtype lo) {
  if (!has_hi) return lo;
  if (!has_lo || dp_dtype_is_float(hi)) return hi;
  if (dp_dtype_is_float(lo)) return dp_promote(hi, lo);
  return hi;
}

static dp_dtype rt_result(const rt_state *s) {
  bool has_low = s->has_zero || s->has_wrapped;
  dp_dtype low = combine(s->has_zero, s->zero, s->has_wrapped, s->wrapped);
  return combine(s->has_dim, s->dim, has_low, low);
}

dp_dtype dp_result_type(const dp_tensor *a, const dp_tensor *b) {
  rt_state s = {0};
  rt_tensor(&s, a);
  rt_tensor(&s, b);
  return rt_result(&s);
}

dp_dtype dp_result_type_number(const dp_tensor *a, const dp_number *v) {
  rt_state s = {0};
  rt_tensor(&s, a);
  rt_number(&s, v);
  return rt_result(&s);
}

bool dp_can_cast(dp_dtype from, dp_dtype to) { return !(dp_dtype_is_float(from) && !dp_dtype_is_float(to)); }

dp_number dp_number_of_double(double v) {
  /* whole and in range: typed as an integer, as a Lua integer would be */
  if (v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0) return dp_number_int((int64_t)v);
  return dp_number_float(v);
}

double dp_number_value(const dp_number *v) { return v->is_int ? (double)v->i : v->d; }

int dp_number_check(const char *op, const dp_number *v, dp_dtype dt) {
  /* c10's checked_convert: an integer into uint8 may be -255..255 (the
   * negatives wrap, two's complement); a float into an integer type must
   * lie in its range (NaN never does); into float32 a finite float must fit */
  bool bad = false;
  if (dt == DP_U8) bad = v->is_int ? (v->i > 255 || v->i < -255) : !(v->d >= 0.0 && v->d <= 255.0);
  else if (dt == DP_I64 && !v->is_int) bad = !(v->d >= -9223372036854775808.0 && v->d < 9223372036854775808.0);
  else if (dt == DP_F32 && !v->is_int) bad = isfinite(v->d) && fabs(v->d) > 3.4028234663852886e38;
  if (!bad) return 0;
  if (v->is_int)
    return dp_error("%s: value %lld cannot be converted to type %s without overflow", op, (long long)v->i,
                    dp_dtype_name(dt));
  return dp_error("%s: value %g cannot be converted to type %s without overflow", op, v->d, dp_dtype_name(dt));
}

dp_tensor *dp_number_tensor(const dp_number *v, dp_dtype dt, dp_device dev) {
  if (v->is_int && dt == DP_I64 && dev.type == DP_CPU) { /* exact, whatever its size */
    dp_tensor *t = dp_empty(DP_I64, 0, NULL, dev);
    if (t) *(int64_t *)dp_data(t) = v->i;
    return t;
  }
  if (v->is_int && dt == DP_U8) /* wraps modulo 256, as a C cast of the integer */
    return dp_scalar((double)(uint8_t)(uint64_t)v->i, dt, dev);
  if (v->is_int && dt == DP_I64) { /* another device: through a CPU scalar */
    dp_tensor *c = dp_number_tensor(v, dt, dp_cpu());
    dp_tensor *r = c ? dp_to(c, dt, dev) : NULL;
    dp_release(c);
    return r;
  }
  return dp_scalar(dp_number_value(v), dt, dev);
}

dp_tensor *dp_cast_raw(dp_tensor *t, dp_dtype dt) {
  if (t->dtype == dt) {
    dp_retain(t);
    return t;
  }
  DP_SCOPE(s);
  dp_tensor *c = dp_scope_add(&s, dp_empty(dt, t->ndim, t->shape, dp_dev(t)));
  if (!c || dp_backend_of(t)->copy(c, t)) return NULL;
  return dp_scope_keep(&s, c);
}
