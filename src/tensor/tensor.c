#include "tensor/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "backends/backend.h"
#include "core/error.h"
#include "tensor/checked.h"

void dp_retain(dp_tensor *t) {
  if (t) __atomic_fetch_add(&t->refcount, 1, __ATOMIC_RELAXED);
}

void dp_release(dp_tensor *t) {
  if (!t) return;
  if (__atomic_fetch_sub(&t->refcount, 1, __ATOMIC_ACQ_REL) != 1) return;
  dp_storage_release(t->storage);
  dp_release(t->view_base);
  dp_release(t->grad);
  if (t->grad_fn) dp_node_release(t->grad_fn);
  dp_grad_hook *h = t->hooks;
  while (h) {
    dp_grad_hook *n = h->next;
    free(h);
    h = n;
  }
  free(t);
}

void dp_clear(dp_tensor **pt) {
  if (*pt) dp_release(*pt);
  *pt = NULL;
}

void dp_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
}

int dp_check_shape(int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > DP_MAXDIM) return dp_error("a tensor has at most %d dimensions, got %d", DP_MAXDIM, ndim);
  char buf[256];
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return dp_error("invalid shape %s: sizes must be >= 0 (size %" PRId64 " at dimension %d)",
                      dp_shape_str_n(ndim, shape, buf, sizeof buf), shape[d], d + 1);
  /* at most 2^59 elements, so that numel * 16 bytes and every offset
   * inside the tensor fit an int64; and the sizes past 0 too (the
   * contiguous strides of any order of the dims: [0, 2^63 - 1, 2^63 - 1]
   * has no element but its strides overflowed) */
  int64_t n, span = 1;
  if (dp_numel_overflow(ndim, shape, &n) || n > INT64_MAX / 16)
    return dp_error("shape %s is too large (more than 2^59 elements)", dp_shape_str_n(ndim, shape, buf, sizeof buf));
  for (int d = 0; d < ndim; d++)
    if (dp_mul_overflow(span, shape[d] > 0 ? shape[d] : 1, &span) || span > INT64_MAX / 16)
      return dp_error("shape %s is too large: its sizes other than 0 multiply to more than 2^59, so its strides "
                      "overflow",
                      dp_shape_str_n(ndim, shape, buf, sizeof buf));
  return 0;
}

static dp_tensor *tensor_struct(dp_storage *s, dp_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
                                int64_t offset) {
  dp_tensor *t = dp_xcalloc(1, sizeof *t);
  t->refcount = 1;
  t->storage = s;
  t->dtype = dt;
  t->ndim = ndim;
  t->offset = offset;
  for (int d = 0; d < ndim; d++) {
    t->shape[d] = shape[d];
    t->stride[d] = stride[d];
  }
  return t;
}

dp_tensor *dp_empty(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev) {
  if ((unsigned)dt >= DP_NDTYPES) {
    dp_error("invalid dtype %d", (int)dt);
    return NULL;
  }
  if (dp_check_shape(ndim, shape)) return NULL;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  dp_storage *s = dp_storage_new((size_t)n * dp_dtype_size(dt), dev);
  if (!s) return NULL;
  int64_t stride[DP_MAXDIM];
  dp_contiguous_strides(ndim, shape, stride);
  return tensor_struct(s, dt, ndim, shape, stride, 0);
}

dp_tensor *dp_empty_like(const dp_tensor *t) { return dp_empty(t->dtype, t->ndim, t->shape, dp_dev(t)); }

dp_tensor *dp_full(dp_dtype dt, int ndim, const int64_t *shape, double v, dp_device dev) {
  dp_tensor *t = dp_empty(dt, ndim, shape, dev);
  if (!t) return NULL;
  if (dp_backend_of(t)->fill(t, v)) {
    dp_release(t);
    return NULL;
  }
  return t;
}

dp_tensor *dp_zeros(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev) {
  return dp_full(dt, ndim, shape, 0.0, dev);
}

dp_tensor *dp_zeros_like(const dp_tensor *t) { return dp_zeros(t->dtype, t->ndim, t->shape, dp_dev(t)); }

dp_tensor *dp_scalar(double v, dp_dtype dt, dp_device dev) { return dp_full(dt, 0, NULL, v, dev); }

/* Checks that every element a view can address lies inside the storage
 * (checked arithmetic: a huge stride or size is an error, not a wrap). */
static int check_view_fits(size_t nbytes, dp_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
                           int64_t offset) {
  if (offset < 0) return dp_error("view offset %" PRId64 " is negative", offset);
  int64_t lo, hi;
  bool empty;
  if (dp_span_overflow(ndim, shape, stride, offset, &lo, &hi, &empty)) {
    char a[256], b[256];
    return dp_error("view of shape %s with strides %s overflows the element offsets",
                    dp_shape_str_n(ndim, shape, a, sizeof a), dp_shape_str_n(ndim, stride, b, sizeof b));
  }
  if (empty) return 0;
  int64_t cap = (int64_t)(nbytes / dp_dtype_size(dt));
  if (lo < 0 || hi >= cap)
    return dp_error("view reaches element %" PRId64 " of a storage holding %" PRId64 " elements", lo < 0 ? lo : hi,
                    cap);
  return 0;
}

dp_tensor *dp_from_storage(dp_storage *s, dp_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
                           int64_t offset) {
  if (dp_check_shape(ndim, shape)) return NULL;
  int64_t cstride[DP_MAXDIM];
  if (!stride) {
    dp_contiguous_strides(ndim, shape, cstride);
    stride = cstride;
  }
  if (check_view_fits(s->nbytes, dt, ndim, shape, stride, offset)) return NULL;
  dp_storage_retain(s);
  return tensor_struct(s, dt, ndim, shape, stride, offset);
}

dp_tensor *dp_alias(const dp_tensor *t) {
  dp_storage_retain(t->storage);
  return tensor_struct(t->storage, t->dtype, t->ndim, t->shape, t->stride, t->offset);
}

dp_tensor *dp_as_strided(const dp_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset) {
  return dp_from_storage(t->storage, t->dtype, ndim, shape, stride, offset);
}

int64_t dp_numel(const dp_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

bool dp_is_contiguous(const dp_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] == 0) return true;
    if (t->shape[d] != 1 && t->stride[d] != s) return false;
    s *= t->shape[d];
  }
  return true;
}

bool dp_same_shape(const dp_tensor *a, const dp_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

const char *dp_shape_str_n(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, n - k, "[");
  for (int d = 0; d < ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, d ? ", %" PRId64 : "%" PRId64, shape[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

const char *dp_shape_str(const dp_tensor *t, char *buf, size_t n) { return dp_shape_str_n(t->ndim, t->shape, buf, n); }

static int64_t elem_offset(const dp_tensor *t, const int64_t *idx) {
  int64_t off = t->offset;
  for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
  return off;
}

static int check_index(const dp_tensor *t, const int64_t *idx) {
  for (int d = 0; d < t->ndim; d++)
    if (idx[d] < 0 || idx[d] >= t->shape[d])
      return dp_error("index %" PRId64 " out of range for dimension %d of size %" PRId64, idx[d] + 1, d + 1,
                      t->shape[d]);
  return 0;
}

int dp_get_d(const dp_tensor *t, const int64_t *idx, double *out) {
  if (check_index(t, idx)) return -1;
  size_t es = dp_elsize(t);
  char *p = (char *)t->storage->data + (size_t)elem_offset(t, idx) * es;
  if (dp_dev(t).type == DP_CPU) {
    *out = dp_load_d(p, t->dtype);
    return 0;
  }
  /* one element through the device backend */
  int64_t one = 1;
  int64_t st = 1;
  dp_tensor *src = dp_from_storage(t->storage, t->dtype, 1, &one, &st, elem_offset(t, idx));
  dp_tensor *dst = dp_empty(t->dtype, 1, &one, dp_cpu());
  int rc = (!src || !dst) ? -1 : dp_backend_of(t)->copy_to_cpu(dst, src);
  if (!rc) *out = dp_load_d(dst->storage->data, t->dtype);
  dp_release(src);
  dp_release(dst);
  return rc;
}

int dp_set_d(dp_tensor *t, const int64_t *idx, double v) {
  if (check_index(t, idx)) return -1;
  size_t es = dp_elsize(t);
  if (dp_dev(t).type == DP_CPU) {
    dp_store_d((char *)t->storage->data + (size_t)elem_offset(t, idx) * es, t->dtype, v);
    dp_bump_version(t);
    return 0;
  }
  int64_t one = 1, st = 1;
  dp_tensor *dst = dp_from_storage(t->storage, t->dtype, 1, &one, &st, elem_offset(t, idx));
  int rc = dst ? dp_backend_of(t)->fill(dst, v) : -1;
  dp_release(dst);
  if (!rc) dp_bump_version(t);
  return rc;
}

int dp_item_d(const dp_tensor *t, double *out) {
  if (dp_numel(t) != 1) {
    char buf[128];
    return dp_error("item() needs a tensor with one element, got shape %s (%" PRId64 " elements)",
                    dp_shape_str(t, buf, sizeof buf), dp_numel(t));
  }
  int64_t idx[DP_MAXDIM] = {0};
  return dp_get_d(t, idx, out);
}

int dp_item_i64(const dp_tensor *t, int64_t *out) {
  if (t->dtype == DP_I64 && dp_dev(t).type == DP_CPU && dp_numel(t) == 1) {
    int64_t idx[DP_MAXDIM] = {0};
    *out = *(int64_t *)((char *)t->storage->data + (size_t)elem_offset(t, idx) * 8);
    return 0;
  }
  double d;
  if (dp_item_d(t, &d)) return -1;
  *out = (int64_t)d;
  return 0;
}

int dp_grad_materialize(dp_tensor *t) {
  if (!t->grad || !t->grad_zero_pending) return 0;
  if (dp_backend_of(t->grad)->fill(t->grad, 0.0)) return -1;
  dp_bump_version(t->grad);
  t->grad_zero_pending = false;
  return 0;
}
