/* Define-by-run autograd.
 *
 * Each differentiable op that sees an input requiring grad (and grad mode
 * on) creates a dp_node: the backward function, the edges to its inputs'
 * producers (or to leaf tensors), the tensors it saved and a few scalar
 * arguments. Outputs point at their node (grad_fn). dp_backward() runs the
 * nodes reachable from the root in reverse creation order (a ready queue
 * ordered by sequence number, as PyTorch does), accumulates into leaves'
 * .grad, fires each leaf's gradient-ready hooks once all its contributions
 * are in, and frees every node's saved tensors as soon as it has run (unless
 * retain_graph), so a step's activations are released by backward itself.
 *
 * Saved tensors are detached aliases (no grad_fn), so an op saving its own
 * output makes no reference cycle. Their storage version is recorded; if an
 * in-place op changed them before backward, backward fails naming the node.
 * Backward functions run with grad mode off, using ordinary dp_* ops. */
#ifndef DP_AUTOGRAD_H
#define DP_AUTOGRAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tensor/tensor.h"

#define DP_NODE_MAX_SAVED 8
#define DP_NODE_MAX_ARGS 8

typedef struct dp_node dp_node;

/* gout[n_outputs]: incoming gradients (NULL where none flowed; the function
 * treats NULL as zeros). gin[n_inputs]: set to new tensors the function
 * owns-and-hands-over, or left NULL for inputs that need no gradient
 * (dp_node_needs(n, i) tells which). Returns 0 or -1 with dp_error. */
typedef int (*dp_backward_fn)(dp_node *n, dp_tensor **gout, dp_tensor **gin);

typedef struct {
  dp_node *fn;     /* producer of this input, or NULL */
  dp_tensor *leaf; /* a leaf requiring grad, or NULL */
  int nr;          /* output number of fn */
} dp_edge;

struct dp_node {
  atomic_int refcount;
  const char *name; /* "MatmulBackward" */
  uint64_t seq;
  dp_backward_fn backward;
  int n_inputs, n_outputs;
  dp_edge *next;
  /* input metadata the backward needs without saving the tensor */
  int64_t (*in_shape)[DP_MAXDIM];
  int *in_ndim;
  dp_dtype *in_dtype;
  dp_tensor *saved[DP_NODE_MAX_SAVED];
  int n_saved;
  bool released; /* saved tensors freed (backward ran without retain) */
  double f[DP_NODE_MAX_ARGS];
  int64_t i[DP_NODE_MAX_ARGS];
  void *ctx; /* op-specific heap state, freed with free_ctx */
  void (*free_ctx)(void *ctx);
  /* engine scratch */
  bool visited;
  int deps;
  dp_tensor **gbuf;
};

/* ---- grad mode (thread-local) ---- */
bool dp_grad_enabled(void);
/* Returns the previous mode. */
bool dp_set_grad_enabled(bool on);

/* True when grad mode is on and any of the n tensors requires grad (stale
 * views are refreshed first: dp_autograd_refresh). */
bool dp_any_requires_grad(int n, dp_tensor *const *ts);

/* Views and in-place writes (ops/inplace.c). dp_view_set_base records that
 * v views `of` (its root base). dp_autograd_refresh rebuilds the grad_fn
 * of a view whose base's history an in-place write replaced since the
 * view's was set (PyTorch regenerates it the same way); dp_node_new and
 * the engine call it, as does every Lua read of grad_fn / requires_grad. */
void dp_view_set_base(dp_tensor *v, dp_tensor *of);
void dp_autograd_refresh(dp_tensor *t);

/* Creates a node for an op with the given inputs (inputs that need no
 * gradient get empty edges; NULL inputs are allowed, e.g. an absent bias). */
dp_node *dp_node_new(const char *name, dp_backward_fn fn, int n_inputs, dp_tensor *const *inputs, int n_outputs);
/* Saves a detached alias of t (NULL allowed); returns its slot. */
int dp_node_save(dp_node *n, const dp_tensor *t);
/* Saved tensor k (NULL if none was saved in that slot). The engine has
 * already checked, before calling the backward function, that the saved
 * tensors still exist and were not modified in place. */
dp_tensor *dp_node_saved(dp_node *n, int k);
/* That check: 0, or -1 + dp_error naming the node. */
int dp_node_check_saved(dp_node *n);
/* Whether input i needs a gradient. */
bool dp_node_needs(const dp_node *n, int i);
/* In-place gradient delivery for backward functions that can write a
 * leaf's gradient themselves (a GEMM with beta): returns the leaf's .grad
 * when input i is a leaf whose gradient buffer is kept (DDP's bucket
 * views: keep_grad_buf) and is contiguous with the leaf's shape, dtype and
 * device, with *beta = 0 when that buffer is zero-pending (overwrite) and 1
 * otherwise (accumulate); NULL otherwise (return gin[i] as usual). After
 * writing, call dp_node_grad_sink_done and leave gin[i] NULL: the engine
 * then counts the leaf as having received its gradient. This saves DDP a
 * copy of every gradient into its buckets. */
dp_tensor *dp_node_grad_sink(dp_node *n, int i, dp_dtype dt, double *beta);
void dp_node_grad_sink_done(dp_node *n, int i);
/* Makes `out` output `nr` of n: sets requires_grad and grad_fn, and gives
 * out its own reference to n. Call once per output; the creator then drops
 * the reference dp_node_new gave it with dp_node_release. */
void dp_node_attach(dp_node *n, dp_tensor *out, int nr);
void dp_node_retain(dp_node *n);
void dp_node_release(dp_node *n);

/* Runs backward from root (any shape if grad is given, else root must have
 * one element and grad defaults to 1). */
int dp_backward(dp_tensor *root, dp_tensor *grad, bool retain_graph);
/* dp_backward watching n tensors ts, each with flags[k]:
 * - DP_WATCH_RETAIN (a non-leaf's t:retain_grad()): the gradient that reached it is handed back in res[k] (owned,
 *   NULL when none did); the caller adds it to its .grad;
 * - DP_WATCH_HOOK (t:register_hook): hook(ctx, k, &g) runs with its whole gradient once it is known (a non-leaf's:
 *   before its grad_fn runs; a leaf's: before it goes into .grad, DDP's hooks after) and may replace g (releasing
 *   the old one); -1 + dp_error stops the backward. A hook may not run backward itself. */
enum { DP_WATCH_RETAIN = 1, DP_WATCH_HOOK = 2 };
typedef int (*dp_watch_hook_fn)(void *ctx, int k, dp_tensor **g);
int dp_backward_watch(dp_tensor *root, dp_tensor *grad, bool retain_graph, int n, dp_tensor *const *ts,
                      const uint8_t *flags, dp_watch_hook_fn hook, void *ctx, dp_tensor **res);

/* torch.autograd.grad without create_graph: the gradients of the n_out outputs (each seeded with gouts[i], or 1
 * for a one-element output when gouts or gouts[i] is NULL) with respect to the n_in inputs (leaves or not, each
 * requiring grad) into res[k] (owned; NULL for an input the outputs do not depend on), touching no tensor's .grad
 * and running no hook. The graph is freed as by dp_backward unless retain_graph. */
int dp_autograd_grad(int n_out, dp_tensor *const *outs, dp_tensor *const *gouts, int n_in, dp_tensor *const *ins,
                     dp_tensor **res, bool retain_graph);

/* Adds a gradient-ready hook to a leaf; returns an id for removal. */
int dp_add_grad_hook(dp_tensor *leaf, dp_grad_hook_fn fn, void *ctx);
void dp_remove_grad_hook(dp_tensor *leaf, int id);

/* Called by the engine after each backward (DDP finalises its buckets in
 * it): `ok` says whether backward itself succeeded; a hook returning -1
 * (with dp_error) makes dp_backward fail with its message. */
typedef int (*dp_engine_hook_fn)(void *ctx, bool ok);
/* Returns the hook's id (> 0), or -1 + dp_error when 16 are live. */
int dp_add_post_backward_hook(dp_engine_hook_fn fn, void *ctx);
/* How many more post-backward hooks can be added now (0..16). */
int dp_post_backward_hooks_free(void);
void dp_remove_post_backward_hook(int id);

/* Sums g (broadcast result) down to the given shape; returns a new tensor
 * (a retained g itself when no reduction is needed). */
dp_tensor *dp_sum_to(dp_tensor *g, int ndim, const int64_t *shape);

/* Accumulates g into t->grad (allocating on first use). Exposed for DDP. */
int dp_accumulate_grad(dp_tensor *leaf, dp_tensor *g);

#endif
