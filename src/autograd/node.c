#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/error.h"

static _Thread_local bool grad_off; /* default: grad mode on */
static atomic_uint_fast64_t next_seq;

bool dp_grad_enabled(void) { return !grad_off; }
bool dp_set_grad_enabled(bool on) {
  bool prev = !grad_off;
  grad_off = !on;
  return prev;
}

bool dp_any_requires_grad(int n, dp_tensor *const *ts) {
  if (grad_off) return false;
  bool any = false;
  for (int i = 0; i < n; i++)
    if (ts[i]) {
      dp_autograd_refresh(ts[i]);
      any |= ts[i]->requires_grad;
    }
  return any;
}

dp_node *dp_node_new(const char *name, dp_backward_fn fn, int n_inputs, dp_tensor *const *inputs, int n_outputs) {
  dp_node *n = dp_xcalloc(1, sizeof *n);
  atomic_init(&n->refcount, 1);
  n->name = name;
  n->seq = atomic_fetch_add(&next_seq, 1);
  n->backward = fn;
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  n->next = dp_xcalloc((size_t)n_inputs, sizeof *n->next);
  n->in_shape = dp_xcalloc((size_t)n_inputs, sizeof *n->in_shape);
  n->in_ndim = dp_xcalloc((size_t)n_inputs, sizeof *n->in_ndim);
  n->in_dtype = dp_xcalloc((size_t)n_inputs, sizeof *n->in_dtype);
  n->gbuf = dp_xcalloc((size_t)n_outputs, sizeof *n->gbuf);
  for (int i = 0; i < n_inputs; i++) {
    dp_tensor *t = inputs[i];
    n->in_ndim[i] = -1;
    if (!t) continue;
    dp_autograd_refresh(t);
    n->in_ndim[i] = t->ndim;
    n->in_dtype[i] = t->dtype;
    memcpy(n->in_shape[i], t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (!t->requires_grad) continue;
    if (t->grad_fn) {
      n->next[i].fn = t->grad_fn;
      n->next[i].nr = t->output_nr;
      dp_node_retain(t->grad_fn);
    } else {
      n->next[i].leaf = t;
      dp_retain(t);
    }
  }
  return n;
}

int dp_node_save(dp_node *n, const dp_tensor *t) {
  DP_ASSERT(n->n_saved < DP_NODE_MAX_SAVED);
  int k = n->n_saved++;
  if (t) {
    dp_tensor *a = dp_alias(t);
    a->saved_version = dp_storage_version(t->storage);
    n->saved[k] = a;
  }
  return k;
}

int dp_node_check_saved(dp_node *n) {
  if (n->released && n->n_saved > 0)
    return dp_error("%s: trying to backward through the graph a second time (its saved tensors were freed "
                    "by the first backward); pass retain_graph=true to the first backward",
                    n->name);
  for (int k = 0; k < n->n_saved; k++) {
    dp_tensor *t = n->saved[k];
    if (t && dp_storage_version(t->storage) != t->saved_version)
      return dp_error("%s: a tensor saved for the gradient computation was modified by an in-place operation "
                      "(version %u, expected %u)",
                      n->name, dp_storage_version(t->storage), t->saved_version);
  }
  return 0;
}

dp_tensor *dp_node_saved(dp_node *n, int k) { return n->saved[k]; }

extern bool dp_engine_capturing; /* engine.c: autograd.grad writes no leaf's .grad */

dp_tensor *dp_node_grad_sink(dp_node *n, int i, dp_dtype dt, double *beta) {
  dp_tensor *leaf = n->next[i].leaf;
  if (!leaf || !leaf->keep_grad_buf || !leaf->grad || dp_engine_capturing || leaf->bw_hooked) return NULL;
  dp_tensor *g = leaf->grad;
  if (g->dtype != dt || leaf->dtype != dt || !dp_same_shape(g, leaf) || !dp_is_contiguous(g) ||
      !dp_device_eq(dp_dev(g), dp_dev(leaf)))
    return NULL;
  *beta = leaf->grad_zero_pending ? 0.0 : 1.0;
  return g;
}

void dp_node_grad_sink_done(dp_node *n, int i) {
  dp_tensor *leaf = n->next[i].leaf;
  leaf->grad_zero_pending = false;
  leaf->bw_got = true;
  dp_bump_version(leaf->grad);
}

bool dp_node_needs(const dp_node *n, int i) { return n->next[i].fn || n->next[i].leaf; }

void dp_node_attach(dp_node *n, dp_tensor *out, int nr) {
  DP_ASSERT(nr < n->n_outputs);
  out->requires_grad = true;
  if (out->grad_fn) dp_node_release(out->grad_fn);
  out->grad_fn = n;
  out->output_nr = nr;
  dp_node_retain(n);
}

void dp_node_retain(dp_node *n) { atomic_fetch_add_explicit(&n->refcount, 1, memory_order_relaxed); }

static void release_saved(dp_node *n) {
  for (int k = 0; k < n->n_saved; k++) dp_clear(&n->saved[k]);
  if (n->ctx && n->free_ctx) n->free_ctx(n->ctx);
  n->ctx = NULL;
  n->released = true;
}

void dp_node_free_saved(dp_node *n);
void dp_node_free_saved(dp_node *n) { release_saved(n); }

void dp_node_release(dp_node *n) {
  /* Long chains (a deep network's graph) are released iteratively: a node
   * whose count drops to zero pushes its producers onto a local stack
   * instead of recursing. */
  dp_node *stack_small[64];
  dp_node **stack = stack_small;
  int sp = 0, cap = 64;
  stack[sp++] = n;
  while (sp) {
    dp_node *x = stack[--sp];
    if (atomic_fetch_sub_explicit(&x->refcount, 1, memory_order_acq_rel) != 1) continue;
    release_saved(x);
    for (int i = 0; i < x->n_inputs; i++) {
      if (x->next[i].leaf) dp_release(x->next[i].leaf);
      if (x->next[i].fn) {
        if (sp == cap) {
          cap *= 2;
          if (stack == stack_small) {
            stack = dp_xmalloc(sizeof *stack * (size_t)cap);
            memcpy(stack, stack_small, sizeof stack_small);
          } else {
            stack = dp_xrealloc(stack, sizeof *stack * (size_t)cap);
          }
        }
        stack[sp++] = x->next[i].fn;
      }
    }
    for (int o = 0; o < x->n_outputs; o++) dp_clear(&x->gbuf[o]);
    free(x->gbuf);
    free(x->next);
    free(x->in_shape);
    free(x->in_ndim);
    free(x->in_dtype);
    free(x);
  }
  if (stack != stack_small) free(stack);
}
