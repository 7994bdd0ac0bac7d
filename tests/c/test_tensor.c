/* The tensor struct (creation, strides, reference counts, element access),
 * views and their strides, broadcasting rules, and the CPU strided
 * iterator (dimension merging, broadcast operands). */
#include <string.h>

#include "backends/cpu/cpu_iter.h"
#include "core/error.h"
#include "ops/ops.h"
#include "test_util.h"

static dp_tensor *arange_f64(int ndim, const int64_t *shape) {
  dp_tensor *t = dp_empty(DP_F64, ndim, shape, dp_cpu());
  double *p = dp_data(t);
  for (int64_t i = 0; i < dp_numel(t); i++) p[i] = (double)i;
  return t;
}

static double at(const dp_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
  int64_t idx[3] = {i0, i1, i2};
  double v = -1;
  CHECK(dp_get_d(t, idx, &v) == 0);
  return v;
}

static void test_struct(void) {
  int64_t shape[3] = {2, 3, 4};
  dp_tensor *t = dp_zeros(DP_F32, 3, shape, dp_cpu());
  CHECK(t && t->ndim == 3 && t->offset == 0 && dp_numel(t) == 24);
  CHECK(t->stride[0] == 12 && t->stride[1] == 4 && t->stride[2] == 1);
  CHECK(dp_is_contiguous(t) && t->dtype == DP_F32 && dp_elsize(t) == 4);
  CHECK(dp_refcount(t) == 1 && __atomic_load_n(&t->storage->refcount, __ATOMIC_SEQ_CST) == 1);
  CHECK(t->storage->nbytes >= 24 * 4);
  CHECK(at(t, 1, 2, 3) == 0.0);
  int64_t idx[3] = {1, 2, 3};
  CHECK(dp_set_d(t, idx, 2.5) == 0 && at(t, 1, 2, 3) == 2.5);
  CHECK(((float *)dp_data(t))[23] == 2.5f);
  idx[1] = 3; /* out of range: the message names the 1-based index and the size */
  CHECK(dp_set_d(t, idx, 1.0) == -1 && strstr(dp_errmsg(), "index 4") && strstr(dp_errmsg(), "size 3"));

  /* an alias shares the storage: two references to it */
  dp_tensor *a = dp_alias(t);
  CHECK(a->storage == t->storage && __atomic_load_n(&t->storage->refcount, __ATOMIC_SEQ_CST) == 2);
  dp_retain(a);
  CHECK(dp_refcount(a) == 2);
  dp_release(a);
  dp_release(a);
  CHECK(__atomic_load_n(&t->storage->refcount, __ATOMIC_SEQ_CST) == 1);
  dp_release(t);

  /* shapes the runtime refuses, with messages naming them */
  int64_t neg[2] = {2, -1};
  CHECK(dp_empty(DP_F32, 2, neg, dp_cpu()) == NULL && strstr(dp_errmsg(), "[2, -1]"));
  int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(dp_empty(DP_F32, 9, big, dp_cpu()) == NULL && strstr(dp_errmsg(), "at most 8"));
  int64_t huge[2] = {INT64_MAX / 4, 8};
  CHECK(dp_empty(DP_F32, 2, huge, dp_cpu()) == NULL && strstr(dp_errmsg(), "too large"));

  /* a 0-dim tensor holds one element */
  dp_tensor *s = dp_scalar(4.0, DP_I64, dp_cpu());
  int64_t v = 0;
  CHECK(s->ndim == 0 && dp_numel(s) == 1 && dp_item_i64(s, &v) == 0 && v == 4);
  dp_release(s);
}

static void test_views(void) {
  int64_t shape[3] = {2, 3, 4};
  dp_tensor *t = arange_f64(3, shape);

  dp_tensor *tr = dp_transpose(t, 0, 2); /* [4, 3, 2] */
  CHECK(tr->shape[0] == 4 && tr->shape[2] == 2 && tr->stride[0] == 1 && tr->stride[2] == 12);
  CHECK(!dp_is_contiguous(tr) && tr->storage == t->storage);
  CHECK(at(tr, 3, 1, 1) == at(t, 1, 1, 3));

  dp_tensor *nr = dp_narrow(t, 2, 1, 2); /* [2, 3, 2], starting at column 1 */
  CHECK(nr->offset == 1 && nr->shape[2] == 2 && nr->stride[1] == 4 && !dp_is_contiguous(nr));
  CHECK(at(nr, 1, 2, 1) == at(t, 1, 2, 2));

  dp_tensor *sel = dp_select(t, 1, 2); /* [2, 4] */
  CHECK(sel->ndim == 2 && sel->offset == 8 && sel->stride[0] == 12 && sel->stride[1] == 1);

  /* view merges dims whose strides allow it, and refuses otherwise */
  dp_tensor *v = dp_view(t, 2, (int64_t[]){6, 4});
  CHECK(v && v->storage == t->storage && v->stride[0] == 4);
  dp_tensor *bad = dp_view(tr, 1, (int64_t[]){24});
  CHECK(bad == NULL && strstr(dp_errmsg(), "not compatible") && strstr(dp_errmsg(), "[4, 3, 2]"));
  /* a narrowed last dim can still be split off the leading dims */
  dp_tensor *v2 = dp_view(nr, 2, (int64_t[]){6, 2});
  CHECK(v2 && v2->stride[0] == 4 && v2->stride[1] == 1 && v2->offset == 1);
  /* reshape copies when no view exists */
  dp_tensor *rs = dp_reshape(tr, 1, (int64_t[]){24});
  CHECK(rs && rs->storage != t->storage && dp_is_contiguous(rs));
  int64_t i3[1] = {5};
  double x = 0;
  CHECK(dp_get_d(rs, i3, &x) == 0 && x == at(tr, 0, 2, 1));

  /* expand: broadcast dims get stride 0; a mismatch names both shapes */
  dp_tensor *col = dp_narrow(t, 2, 0, 1); /* [2, 3, 1] */
  dp_tensor *ex = dp_expand_raw(col, 4, (int64_t[]){5, 2, 3, 4});
  CHECK(ex && ex->stride[0] == 0 && ex->stride[3] == 0 && ex->stride[1] == 12);
  CHECK(dp_expand_raw(t, 3, (int64_t[]){2, 5, 4}) == NULL && strstr(dp_errmsg(), "[2, 3, 4]"));

  /* unsqueeze / squeeze / permute keep the storage and the element map */
  dp_tensor *u = dp_unsqueeze(t, 1);
  CHECK(u->ndim == 4 && u->shape[1] == 1 && u->stride[2] == 4);
  dp_tensor *sq = dp_squeeze(u, -1);
  CHECK(sq->ndim == 3 && sq->shape[1] == 3);
  dp_tensor *pm = dp_permute(t, (int[]){1, 2, 0});
  CHECK(pm->shape[0] == 3 && pm->shape[2] == 2 && at(pm, 2, 3, 1) == at(t, 1, 2, 3));
  CHECK(dp_permute(t, (int[]){0, 0, 1}) == NULL && strstr(dp_errmsg(), "repeated"));

  /* as_strided checks that the view stays inside the storage */
  CHECK(dp_as_strided(t, 1, (int64_t[]){5}, (int64_t[]){6}, 0) == NULL && strstr(dp_errmsg(), "reaches element 24"));

  dp_tensor *all[] = {t, tr, nr, sel, v, v2, rs, col, ex, u, sq, pm};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dp_release(all[i]);
}

static void test_broadcast_shape(void) {
  dp_tensor *a = dp_empty(DP_F32, 3, (int64_t[]){2, 1, 3}, dp_cpu());
  dp_tensor *b = dp_empty(DP_F32, 2, (int64_t[]){4, 3}, dp_cpu());
  dp_tensor *c = dp_empty(DP_F32, 1, (int64_t[]){2}, dp_cpu());
  int nd;
  int64_t sh[DP_MAXDIM];
  CHECK(dp_broadcast_shape(a, b, &nd, sh) == 0 && nd == 3 && sh[0] == 2 && sh[1] == 4 && sh[2] == 3);
  CHECK(dp_broadcast_shape(b, c, &nd, sh) == -1);
  CHECK(strstr(dp_errmsg(), "[4, 3]") && strstr(dp_errmsg(), "[2]") && strstr(dp_errmsg(), "dimension 2"));
  dp_release(a), dp_release(b), dp_release(c);
}

/* ---- the strided iterator ---- */
typedef struct {
  int calls;
  int64_t total;
} iter_log;

static void add_rows(char *const *p, const int64_t *s, int64_t n, void *ctx) {
  iter_log *log = ctx;
  log->calls++;
  log->total += n;
  for (int64_t i = 0; i < n; i++)
    *(double *)(p[0] + i * s[0]) = *(double *)(p[1] + i * s[1]) + *(double *)(p[2] + i * s[2]);
}

static void test_iterator(void) {
  int64_t shape[3] = {3, 4, 5};
  dp_tensor *a = arange_f64(3, shape);
  dp_tensor *out = dp_zeros(DP_F64, 3, shape, dp_cpu());
  /* contiguous operands merge into one row of 60 */
  iter_log log = {0};
  const dp_tensor *ops[3] = {out, a, a};
  dp_cpu_foreach(3, ops, add_rows, &log);
  CHECK(log.calls == 1 && log.total == 60 && at(out, 2, 3, 4) == 2 * at(a, 2, 3, 4));

  /* a broadcast row [1, 1, 5] (stride 0 on dims 0, 1) and a transposed
   * operand: every element still visited once, in the right place */
  dp_tensor *plane = dp_select(a, 0, 0);      /* [4, 5] */
  dp_tensor *row = dp_narrow(plane, 0, 1, 1); /* [1, 5]: values 5..9 */
  dp_tensor *rowe = dp_expand_raw(row, 3, shape);
  dp_tensor *b = arange_f64(3, (int64_t[]){5, 4, 3});
  dp_tensor *bt = dp_permute(b, (int[]){2, 1, 0}); /* [3, 4, 5], strides [1, 3, 12] */
  const dp_tensor *ops2[3] = {out, rowe, bt};
  log = (iter_log){0};
  dp_cpu_foreach(3, ops2, add_rows, &log);
  CHECK(log.total == 60 && log.calls == 12);
  bool ok = true;
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++)
      for (int64_t k = 0; k < 5; k++) ok &= at(out, i, j, k) == (double)(5 + k) + at(bt, i, j, k);
  CHECK(ok);

  /* size-1 dims are dropped before merging; an empty tensor is no call */
  dp_tensor *one = arange_f64(4, (int64_t[]){1, 6, 1, 2});
  dp_tensor *o1 = dp_zeros(DP_F64, 4, one->shape, dp_cpu());
  const dp_tensor *ops3[3] = {o1, one, one};
  log = (iter_log){0};
  dp_cpu_foreach(3, ops3, add_rows, &log);
  CHECK(log.calls == 1 && log.total == 12);
  dp_tensor *empty = dp_zeros(DP_F64, 2, (int64_t[]){3, 0}, dp_cpu());
  const dp_tensor *ops4[3] = {empty, empty, empty};
  log = (iter_log){0};
  dp_cpu_foreach(3, ops4, add_rows, &log);
  CHECK(log.calls == 0);

  dp_release(plane), dp_release(row), dp_release(rowe), dp_release(a), dp_release(out), dp_release(b), dp_release(bt);
  dp_release(one), dp_release(o1), dp_release(empty);
}

int main(void) {
  test_struct();
  test_views();
  test_broadcast_shape();
  test_iterator();
  TEST_DONE();
}
