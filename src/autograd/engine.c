/* The backward engine. See autograd.h for the contract. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "ops/ops.h"

void dp_node_free_saved(dp_node *n);

/* ---- post-backward hooks ---- */
typedef struct {
  dp_engine_hook_fn fn;
  void *ctx;
  int id;
} post_hook;
static post_hook post_hooks[16];
static int n_post_hooks, next_hook_id = 1;

int dp_add_post_backward_hook(dp_engine_hook_fn fn, void *ctx) {
  if (n_post_hooks >= 16)
    return dp_error("at most 16 post-backward hooks (DistributedDataParallel instances) can be live at once");
  post_hooks[n_post_hooks] = (post_hook){fn, ctx, next_hook_id};
  n_post_hooks++;
  return next_hook_id++;
}

int dp_post_backward_hooks_free(void) { return 16 - n_post_hooks; }

void dp_remove_post_backward_hook(int id) {
  for (int i = 0; i < n_post_hooks; i++)
    if (post_hooks[i].id == id) {
      memmove(&post_hooks[i], &post_hooks[i + 1], sizeof(post_hook) * (size_t)(n_post_hooks - i - 1));
      n_post_hooks--;
      return;
    }
}

int dp_add_grad_hook(dp_tensor *leaf, dp_grad_hook_fn fn, void *ctx) {
  static int next_id = 1;
  dp_grad_hook *h = dp_xcalloc(1, sizeof *h);
  h->fn = fn;
  h->ctx = ctx;
  h->id = next_id++;
  /* append: hooks run in registration order */
  dp_grad_hook **pp = &leaf->hooks;
  while (*pp) pp = &(*pp)->next;
  *pp = h;
  return h->id;
}

void dp_remove_grad_hook(dp_tensor *leaf, int id) {
  for (dp_grad_hook **pp = &leaf->hooks; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      dp_grad_hook *h = *pp;
      *pp = h->next;
      free(h);
      return;
    }
}

/* ---- gradient accumulation ---- */
int dp_accumulate_grad(dp_tensor *leaf, dp_tensor *g) {
  if (!dp_same_shape(leaf, g)) {
    char a[128], b[128];
    return dp_error("gradient of shape %s does not match its tensor's shape %s", dp_shape_str(g, b, sizeof b),
                    dp_shape_str(leaf, a, sizeof a));
  }
  if (leaf->grad) {
    /* in place: DDP's bucket views and optimizers keep pointing at it; a
     * buffer marked zero-pending is overwritten instead of added to */
    if (leaf->grad_zero_pending) {
      if (dp_copy_(leaf->grad, g)) return -1;
      leaf->grad_zero_pending = false;
      return 0;
    }
    if (dp_binary_(DP_B_ADD, leaf->grad, g)) return -1;
    return 0;
  }
  /* First gradient: take it over when nobody else holds it, else copy. */
  if (dp_refcount(g) == 1 && g->dtype == leaf->dtype && dp_is_contiguous(g) && dp_device_eq(dp_dev(g), dp_dev(leaf)) &&
      !g->requires_grad) {
    dp_retain(g);
    leaf->grad = g;
    return 0;
  }
  dp_tensor *c = dp_empty(leaf->dtype, leaf->ndim, leaf->shape, dp_dev(leaf));
  if (!c) return -1;
  if (dp_copy_(c, g)) {
    dp_release(c);
    return -1;
  }
  leaf->grad = c;
  return 0;
}

/* ---- ready queue: max-heap on sequence number (latest op first) ---- */
typedef struct {
  dp_node **a;
  int n, cap;
} heap;

static void heap_push(heap *h, dp_node *x) {
  if (h->n == h->cap) {
    h->cap = h->cap ? h->cap * 2 : 64;
    h->a = dp_xrealloc(h->a, sizeof *h->a * (size_t)h->cap);
  }
  int i = h->n++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (h->a[p]->seq >= x->seq) break;
    h->a[i] = h->a[p];
    i = p;
  }
  h->a[i] = x;
}

static dp_node *heap_pop(heap *h) {
  dp_node *top = h->a[0], *x = h->a[--h->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    uint64_t mv = x->seq;
    if (l < h->n && h->a[l]->seq > mv) m = l, mv = h->a[l]->seq;
    if (r < h->n && h->a[r]->seq > mv) m = r;
    if (m == i) break;
    h->a[i] = h->a[m];
    i = m;
  }
  if (h->n) h->a[i] = x;
  return top;
}

typedef struct {
  void **a;
  int n, cap;
} vec;
static void vec_push(vec *v, void *x) {
  if (v->n == v->cap) {
    v->cap = v->cap ? v->cap * 2 : 64;
    v->a = dp_xrealloc(v->a, sizeof *v->a * (size_t)v->cap);
  }
  v->a[v->n++] = x;
}

static void fire_leaf_hooks(dp_tensor *leaf) {
  for (dp_grad_hook *h = leaf->hooks; h; h = h->next) h->fn(leaf, h->ctx);
}

/* Adds g (owned) into slot *dst. */
static int add_into(dp_tensor **dst, dp_tensor *g) {
  if (!*dst) {
    *dst = g;
    return 0;
  }
  dp_tensor *s = dp_add(*dst, g);
  dp_release(g);
  if (!s) return -1;
  dp_release(*dst);
  *dst = s;
  return 0;
}

/* Accumulates g (consumed; NULL when none flowed) into the leaf and fires
 * its hooks once its last expected contribution is in. */
static int deliver_to_leaf(dp_tensor *leaf, dp_tensor *g) {
  int rc = 0;
  if (g) {
    rc = dp_accumulate_grad(leaf, g);
    dp_release(g);
    leaf->bw_got = true;
  }
  if (--leaf->bw_pending == 0 && leaf->bw_got && !rc) fire_leaf_hooks(leaf);
  return rc;
}

/* The tensors a pass watches. autograd.grad (dp_autograd_grad, `only`): the gradients reaching the tensors in `in`
 * are added into `res` instead of any leaf's .grad, and no leaf hook, grad sink or post-backward hook runs.
 * backward (dp_backward_watch): the leaves get their .grad as always; per tensor, a retained one's gradient is added
 * into res[k], a hooked one's goes through the hook first. */
typedef struct {
  int n;
  dp_tensor *const *in;
  dp_tensor **res;
  bool only;            /* autograd.grad: only these get gradients; else the leaves' .grad as usual too */
  const uint8_t *flags; /* per tensor: DP_WATCH_HOOK and / or DP_WATCH_RETAIN (NULL: capture each) */
  dp_watch_hook_fn hook;
  void *hook_ctx;
  dp_tensor **pend; /* per tensor: a hooked leaf's contributions so far this pass */
} capture;
static int engine_depth; /* a hook that runs backward would reuse this pass's scratch: refused */

static uint8_t watch_flags(const capture *cap, int k) { return cap->flags ? cap->flags[k] : DP_WATCH_RETAIN; }

/* a leaf's gradient arriving along one edge (g NULL: none flowed there): into its .grad, or for a leaf a hook
 * watches, gathered until the last contribution, handed to the hook, then into its .grad */
static int leaf_arrival(capture *cap, dp_tensor *leaf, dp_tensor *g);
bool dp_engine_capturing; /* read by dp_node_grad_sink: no leaf's buffer is written while set */

/* Adds g (retained for each, then released) into every res[k] whose input is t. */
static int capture_into(capture *cap, const dp_tensor *t, dp_tensor *g) {
  int rc = 0;
  for (int k = 0; k < cap->n && g && !rc; k++)
    if (cap->in[k] == t) {
      dp_retain(g);
      rc = add_into(&cap->res[k], g);
    }
  dp_release(g);
  return rc;
}

static int leaf_arrival(capture *cap, dp_tensor *leaf, dp_tensor *g) {
  if (!cap || !leaf->bw_hooked) return deliver_to_leaf(leaf, g);
  int k = 0;
  while (k < cap->n && !(cap->in[k] == leaf && (watch_flags(cap, k) & DP_WATCH_HOOK))) k++;
  if (k == cap->n) return deliver_to_leaf(leaf, g);
  int rc = g ? add_into(&cap->pend[k], g) : 0;
  if (leaf->bw_pending > 1) {
    leaf->bw_pending--;
    return rc;
  }
  if (!rc && cap->pend[k]) rc = cap->hook(cap->hook_ctx, k, &cap->pend[k]);
  dp_tensor *t = cap->pend[k];
  cap->pend[k] = NULL;
  if (rc) {
    dp_release(t);
    leaf->bw_pending--;
    return rc;
  }
  return deliver_to_leaf(leaf, t);
}

/* The gradient of root: grad converted to root's dtype and device, or 1 for a one-element root. */
static dp_tensor *seed_grad(const char *who, dp_tensor *root, dp_tensor *grad) {
  if (!root->requires_grad) {
    dp_error("%s: the tensor does not require grad and has no grad_fn (was it computed "
             "under no_grad, or from tensors without requires_grad?)",
             who);
    return NULL;
  }
  if (grad) {
    if (!dp_same_shape(grad, root)) {
      char a[128], b[128];
      dp_error("%s: gradient shape %s does not match the tensor's shape %s", who, dp_shape_str(grad, a, sizeof a),
               dp_shape_str(root, b, sizeof b));
      return NULL;
    }
    return dp_to(grad, root->dtype, dp_dev(root));
  }
  if (dp_numel(root) != 1) {
    char a[128];
    dp_error("%s: grad can be implicitly created only for scalar outputs; the tensor "
             "has shape %s (pass a gradient of the same shape)",
             who, dp_shape_str(root, a, sizeof a));
    return NULL;
  }
  return dp_full(root->dtype, root->ndim, root->shape, 1.0, dp_dev(root));
}

/* Runs the graph from the roots, each seeded with its gradient g0[i] (consumed), in reverse creation order; with
 * cap, gradients go to cap->res (above), else into the leaves' .grad. Grad mode must be off. */
static int run_graph(int n_roots, dp_tensor *const *roots, dp_tensor **g0, capture *cap, bool retain_graph) {
  int rc = 0;
  /* Pass 1: every node reachable from the roots, with dependency counts. */
  vec nodes = {0}, leaves = {0}, stack = {0};
  for (int r = 0; r < n_roots; r++) {
    dp_node *start = roots[r]->grad_fn;
    if (!start || start->visited) continue;
    start->visited = true;
    vec_push(&nodes, start);
    vec_push(&stack, start);
  }
  while (stack.n) {
    dp_node *n = stack.a[--stack.n];
    for (int i = 0; i < n->n_inputs; i++) {
      dp_edge *e = &n->next[i];
      if (e->fn) {
        e->fn->deps++;
        if (!e->fn->visited) {
          e->fn->visited = true;
          vec_push(&nodes, e->fn);
          vec_push(&stack, e->fn);
        }
      } else if (e->leaf) {
        if (e->leaf->bw_pending++ == 0) {
          e->leaf->bw_got = false;
          vec_push(&leaves, e->leaf);
        }
      }
    }
  }

  /* Pass 2: run nodes in reverse creation order as they become ready. A root without a grad_fn (a leaf) gets its
   * gradient at once; a root's node is ready when no other root's graph leads to it. */
  heap ready = {0};
  for (int r = 0; r < n_roots; r++) {
    dp_tensor *g = g0[r];
    g0[r] = NULL;
    dp_node *start = roots[r]->grad_fn;
    if (rc) {
      dp_release(g);
    } else if (!start) {
      if (cap && cap->only) {
        rc = capture_into(cap, roots[r], g);
      } else {
        roots[r]->bw_pending = 1;
        roots[r]->bw_got = false;
        rc = leaf_arrival(cap, roots[r], g);
        roots[r]->bw_pending = 0;
        roots[r]->bw_got = false;
      }
    } else {
      rc = add_into(&start->gbuf[roots[r]->output_nr], g);
      bool first = true;
      for (int q = 0; q < r; q++) first &= roots[q]->grad_fn != start;
      if (first && start->deps == 0) heap_push(&ready, start);
    }
  }
  dp_tensor *gin_small[8];
  while (ready.n && !rc) {
    dp_node *n = heap_pop(&ready);
    if (cap) /* the gradients of watched non-leaf tensors: what reached this node's outputs, before it runs */
      for (int k = 0; k < cap->n && !rc; k++) {
        dp_tensor **gb = &n->gbuf[cap->in[k]->output_nr];
        if (cap->in[k]->grad_fn != n || !*gb) continue;
        uint8_t f = watch_flags(cap, k);
        if (f & DP_WATCH_HOOK) rc = cap->hook(cap->hook_ctx, k, gb);
        if (!rc && (f & DP_WATCH_RETAIN)) {
          dp_tensor *c = dp_clone(*gb);
          rc = c ? add_into(&cap->res[k], c) : -1;
        }
      }
    if (rc) break;
    bool any = false;
    for (int o = 0; o < n->n_outputs; o++) any |= n->gbuf[o] != NULL;
    dp_tensor **gin = n->n_inputs <= 8 ? gin_small : dp_xcalloc((size_t)n->n_inputs, sizeof *gin);
    memset(gin, 0, sizeof *gin * (size_t)n->n_inputs);
    if (any) {
      if (dp_node_check_saved(n) || n->backward(n, n->gbuf, gin)) {
        dp_error_prefix(": ");
        dp_error_prefix(n->name);
        dp_error_prefix("backward of ");
        rc = -1;
      }
    }
    for (int o = 0; o < n->n_outputs; o++) dp_clear(&n->gbuf[o]);
    if (!retain_graph) dp_node_free_saved(n);
    for (int i = 0; i < n->n_inputs; i++) {
      dp_edge *e = &n->next[i];
      dp_tensor *g = gin[i];
      gin[i] = NULL;
      if (rc) {
        dp_release(g);
        continue;
      }
      if (g && e->fn) {
        rc = add_into(&e->fn->gbuf[e->nr], g);
      } else if (e->leaf) {
        rc = cap && cap->only ? capture_into(cap, e->leaf, g) : leaf_arrival(cap, e->leaf, g);
        continue;
      } else {
        dp_release(g);
      }
      if (e->fn && --e->fn->deps == 0) heap_push(&ready, e->fn);
    }
    if (gin != gin_small) free(gin);
  }

  /* Reset scratch state so the next backward starts clean, error or not. */
  for (int k = 0; k < nodes.n; k++) {
    dp_node *n = nodes.a[k];
    n->visited = false;
    n->deps = 0;
    for (int o = 0; o < n->n_outputs; o++) dp_clear(&n->gbuf[o]);
  }
  for (int k = 0; k < leaves.n; k++) {
    dp_tensor *l = leaves.a[k];
    l->bw_pending = 0;
    l->bw_got = false;
  }
  free(nodes.a);
  free(leaves.a);
  free(stack.a);
  free(ready.a);
  return rc;
}

int dp_backward(dp_tensor *root, dp_tensor *grad, bool retain_graph) {
  return dp_backward_watch(root, grad, retain_graph, 0, NULL, NULL, NULL, NULL, NULL);
}

int dp_backward_watch(dp_tensor *root, dp_tensor *grad, bool retain_graph, int n, dp_tensor *const *ts,
                      const uint8_t *flags, dp_watch_hook_fn hook, void *hook_ctx, dp_tensor **res) {
  if (engine_depth)
    return dp_error("backward: called during backward (from a gradient hook or a custom Function's backward: the "
                    "engine does not re-enter)");
  dp_autograd_refresh(root);
  for (int k = 0; k < n; k++) {
    res[k] = NULL;
    dp_autograd_refresh(ts[k]);
  }
  dp_tensor *g0 = seed_grad("backward", root, grad);
  if (!g0) return -1;
  dp_tensor **pend = n ? dp_xcalloc((size_t)n, sizeof *pend) : NULL;
  for (int k = 0; k < n; k++)
    if (flags && (flags[k] & DP_WATCH_HOOK) && !ts[k]->grad_fn) ts[k]->bw_hooked = true;
  bool prev = dp_set_grad_enabled(false);
  capture cap = {n, ts, res, false, flags, hook, hook_ctx, pend};
  engine_depth++;
  int rc = run_graph(1, &root, &g0, n ? &cap : NULL, retain_graph);
  engine_depth--;
  dp_set_grad_enabled(prev);
  for (int k = 0; k < n; k++) {
    ts[k]->bw_hooked = false;
    dp_clear(&pend[k]);
    if (rc) dp_clear(&res[k]);
  }
  free(pend);
  /* every hook runs (each owner must reset its per-backward state); the
   * first failure is reported */
  char first_err[1024] = "";
  for (int i = 0; i < n_post_hooks; i++) {
    bool ok = rc == 0 && !first_err[0];
    if (post_hooks[i].fn(post_hooks[i].ctx, ok) && !first_err[0])
      snprintf(first_err, sizeof first_err, "%s", dp_errmsg());
  }
  if (first_err[0] && rc == 0) rc = dp_error("%s", first_err);
  return rc;
}

int dp_autograd_grad(int n_out, dp_tensor *const *outs, dp_tensor *const *gouts, int n_in, dp_tensor *const *ins,
                     dp_tensor **res, bool retain_graph) {
  if (engine_depth)
    return dp_error("autograd.grad: called during backward (from a gradient hook or a custom Function's backward: the "
                    "engine does not re-enter)");
  for (int k = 0; k < n_in; k++) {
    res[k] = NULL;
    dp_autograd_refresh(ins[k]);
    if (!ins[k]->requires_grad) return dp_error("autograd.grad: input %d does not require grad", k + 1);
  }
  dp_tensor **g0 = dp_xcalloc((size_t)(n_out > 0 ? n_out : 1), sizeof *g0);
  int rc = 0;
  for (int i = 0; i < n_out && !rc; i++) {
    dp_autograd_refresh(outs[i]);
    char who[64];
    snprintf(who, sizeof who, "autograd.grad: output %d", i + 1);
    g0[i] = seed_grad(who, outs[i], gouts ? gouts[i] : NULL);
    if (!g0[i]) rc = -1;
  }
  if (rc) {
    for (int i = 0; i < n_out; i++) dp_release(g0[i]);
    free(g0);
    return -1;
  }
  bool prev = dp_set_grad_enabled(false);
  capture cap = {n_in, ins, res, true, NULL, NULL, NULL, NULL};
  dp_engine_capturing = true;
  engine_depth++;
  rc = run_graph(n_out, outs, g0, &cap, retain_graph);
  engine_depth--;
  dp_engine_capturing = false;
  dp_set_grad_enabled(prev);
  free(g0);
  if (rc)
    for (int k = 0; k < n_in; k++) dp_clear(&res[k]);
  return rc;
}
