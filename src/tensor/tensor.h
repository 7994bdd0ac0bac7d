/* The tensor: a strided view onto a storage, plus its autograd state.
 *
 * The C API is 0-based everywhere (dims, indices); the Lua binding converts
 * from Lua's 1-based positions and names the user's numbers in its errors.
 * Functions that can fail return NULL (or -1) and set dp_errmsg(). Every
 * tensor returned by a dp_* function is owned by the caller (refcount 1 for
 * the caller) and must be released with dp_release.
 *
 * Plain C that C++ reads too, so the CUDA kernel files (.cu, compiled as
 * C++) take tensors as they are: reference counts and versions are plain
 * integers that only the __atomic builtins touch (dp_retain / dp_release,
 * dp_refcount, dp_bump_version). */
#ifndef DP_TENSOR_H
#define DP_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/dtype.h"
#include "tensor/storage.h"

#define DP_MAXDIM 8

struct dp_node;
struct dp_tensor;

/* A C callback fired when a leaf's gradient for the current backward pass is
 * complete (every contribution accumulated). The DDP reducer hangs on it. */
typedef void (*dp_grad_hook_fn)(struct dp_tensor *leaf, void *ctx);
typedef struct dp_grad_hook {
  dp_grad_hook_fn fn;
  void *ctx;
  int id;
  struct dp_grad_hook *next;
} dp_grad_hook;

typedef struct dp_tensor {
  int refcount; /* atomic: dp_retain / dp_release / dp_refcount */
  dp_storage *storage;
  int64_t offset; /* in elements */
  int ndim;
  int64_t shape[DP_MAXDIM];
  int64_t stride[DP_MAXDIM]; /* in elements */
  dp_dtype dtype;

  /* autograd */
  bool requires_grad;
  bool keep_grad_buf;     /* zero_grad keeps .grad's memory instead of dropping
                             it (DDP points .grad into its bucket memory) */
  bool grad_zero_pending; /* .grad counts as absent (PyTorch's None: Lua reads
                             nil, optimizers skip it) and its memory as zeros:
                             the next accumulation overwrites it; C code that
                             needs the zeros materialises them
                             (dp_grad_materialize) */
  struct dp_tensor *grad;
  struct dp_node *grad_fn; /* NULL for leaves */
  int output_nr;           /* which output of grad_fn this is */
  dp_grad_hook *hooks;
  int bw_pending;         /* engine scratch: contributions still expected */
  bool bw_got;            /* engine scratch: a gradient arrived this pass */
  bool bw_hooked;         /* engine scratch: a Lua hook reads this leaf's gradient this pass (no grad sink) */
  unsigned saved_version; /* storage version when saved for backward */
  /* views and in-place writes (ops/inplace.c): a differentiable view
   * keeps the tensor it views (the root of a chain of views, retained); an
   * in-place write through a view gives the base a new history
   * (CopySlices) and bumps base->hist, and a view whose view_hist differs
   * from its base's hist rebuilds its grad_fn from the base's history
   * before autograd next reads it (dp_autograd_refresh). */
  struct dp_tensor *view_base;
  unsigned view_hist;
  unsigned hist;
} dp_tensor;

#ifdef __cplusplus
extern "C" {
#endif

/* ---- lifetime ---- */
void dp_retain(dp_tensor *t);
void dp_release(dp_tensor *t);
/* Releases *pt and sets it to NULL (no-op on NULL). */
void dp_clear(dp_tensor **pt);
/* The current reference count (1: the caller holds the only reference). */
static inline int dp_refcount(const dp_tensor *t) { return __atomic_load_n(&t->refcount, __ATOMIC_ACQUIRE); }

/* ---- creation (uninitialised / filled) ---- */
dp_tensor *dp_empty(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev);
dp_tensor *dp_empty_like(const dp_tensor *t);
dp_tensor *dp_zeros(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev);
dp_tensor *dp_full(dp_dtype dt, int ndim, const int64_t *shape, double v, dp_device dev);
dp_tensor *dp_zeros_like(const dp_tensor *t);
dp_tensor *dp_scalar(double v, dp_dtype dt, dp_device dev); /* 0-dim */
/* A tensor over existing storage (retains it). Checks the view fits. */
dp_tensor *dp_from_storage(dp_storage *s, dp_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
                           int64_t offset);

/* ---- raw views: share storage, no autograd (ops/view.c has the
 * differentiable versions) ---- */
dp_tensor *dp_alias(const dp_tensor *t); /* same view, detached */
dp_tensor *dp_as_strided(const dp_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset);

/* ---- queries ---- */
int64_t dp_numel(const dp_tensor *t);
bool dp_is_contiguous(const dp_tensor *t);
static inline size_t dp_elsize(const dp_tensor *t) { return dp_dtype_size(t->dtype); }
static inline void *dp_data(const dp_tensor *t) {
  return (char *)t->storage->data + (size_t)t->offset * dp_dtype_size(t->dtype);
}
static inline dp_device dp_dev(const dp_tensor *t) { return t->storage->device; }
static inline bool dp_is_leaf(const dp_tensor *t) { return t->grad_fn == NULL; }
bool dp_same_shape(const dp_tensor *a, const dp_tensor *b);
/* "[2, 3]" */
const char *dp_shape_str(const dp_tensor *t, char *buf, size_t n);
const char *dp_shape_str_n(int ndim, const int64_t *shape, char *buf, size_t n);
void dp_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
/* Checks shape entries are >= 0 and the element count fits. */
int dp_check_shape(int ndim, const int64_t *shape);
/* Marks an in-place write (autograd version check). */
static inline void dp_bump_version(dp_tensor *t) { __atomic_fetch_add(&t->storage->version, 1u, __ATOMIC_SEQ_CST); }

/* Reads / writes one element by 0-based multi-index (scalar paths, tests,
 * printing; CUDA tensors are copied through the backend). */
int dp_get_d(const dp_tensor *t, const int64_t *idx, double *out);
int dp_set_d(dp_tensor *t, const int64_t *idx, double v);
/* First element as double (item()). */
int dp_item_d(const dp_tensor *t, double *out);
int dp_item_i64(const dp_tensor *t, int64_t *out);

/* If t->grad is zero-pending, writes the zeros now. */
int dp_grad_materialize(dp_tensor *t);

/* PyTorch-style text: "tensor([[1., 2.],\n        [3., 4.]])". Returns a
 * malloc'ed string. */
char *dp_tensor_format(const dp_tensor *t);

#ifdef __cplusplus
}
#endif

#endif
