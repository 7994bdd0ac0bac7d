/* The backward engine: a diamond graph runs every node once, in reverse
 * creation order, only after all its consumers; a leaf used twice
 * accumulates both contributions; the gradient-ready hook fires exactly
 * once per leaf, after its last contribution, in the order the leaves
 * become ready (what DDP's bucketing relies on); errors name the node. */
#include <stdio.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "ops/ops.h"
#include "test_util.h"

/* ---- a recording op: y = scale * (sum of inputs), same shape ---- */
static char order[32][16];
static int n_order;

static int rec_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  snprintf(order[n_order++], sizeof order[0], "%s", n->name);
  if (n->i[0]) return dp_error("refused on purpose");
  for (int i = 0; i < n->n_inputs; i++) {
    if (!dp_node_needs(n, i) || (n->i[1] >> i) & 1) continue; /* bit i: give no gradient to input i */
    gin[i] = dp_binary_scalar(DP_B_MUL, gout[0], n->f[0], false);
    if (!gin[i]) return -1;
  }
  return 0;
}

static dp_tensor *rec(const char *name, int nin, dp_tensor **ins, double scale) {
  dp_tensor *y = dp_zeros(DP_F64, ins[0]->ndim, ins[0]->shape, dp_cpu());
  dp_node *n = dp_node_new(name, rec_backward, nin, ins, 1);
  n->f[0] = scale;
  dp_node_attach(n, y, 0);
  dp_node_release(n);
  return y;
}

static dp_tensor *leaf(double v) {
  dp_tensor *t = dp_full(DP_F64, 1, (int64_t[]){2}, v, dp_cpu());
  t->requires_grad = true;
  return t;
}

static double grad0(const dp_tensor *t) {
  double v = -999;
  CHECK(t->grad && dp_get_d(t->grad, (int64_t[]){0}, &v) == 0);
  return v;
}

/* ---- hooks record which leaf fired and its gradient at that moment ---- */
typedef struct {
  const char *name;
  int fired;
  double grad_when_fired;
} hook_rec;
static const char *hook_order[8];
static int n_hooks;

static void on_ready(dp_tensor *t, void *ctx) {
  hook_rec *h = ctx;
  h->fired++;
  h->grad_when_fired = grad0(t);
  hook_order[n_hooks++] = h->name;
}

static int post_calls, post_ok;
static int on_post(void *ctx, bool ok) {
  (void)ctx;
  post_calls++;
  post_ok = ok;
  return 0;
}

static void reset(void) {
  n_order = 0;
  n_hooks = 0;
  post_calls = 0;
}

static void test_diamond(void) {
  reset();
  dp_tensor *x = leaf(1.0);
  hook_rec hx = {"x", 0, 0};
  dp_add_grad_hook(x, on_ready, &hx);
  /* a = 2x; b = 3a; c = 5a; d = b + c  (so dd/dx = 2 * (3 + 5) = 16) */
  dp_tensor *a = rec("A", 1, &x, 2.0);
  dp_tensor *b = rec("B", 1, &a, 3.0);
  dp_tensor *c = rec("C", 1, &a, 5.0);
  dp_tensor *d = rec("D", 2, (dp_tensor *[]){b, c}, 1.0);
  int hid = dp_add_post_backward_hook(on_post, NULL);
  dp_tensor *g = dp_full(DP_F64, 1, (int64_t[]){2}, 1.0, dp_cpu());
  CHECK(dp_backward(d, g, false) == 0);
  /* D first; C before B (created later); A once, after both */
  CHECK(n_order == 4);
  CHECK(strcmp(order[0], "D") == 0 && strcmp(order[1], "C") == 0 && strcmp(order[2], "B") == 0 &&
        strcmp(order[3], "A") == 0);
  CHECK(grad0(x) == 16.0);
  CHECK(hx.fired == 1 && hx.grad_when_fired == 16.0);
  CHECK(post_calls == 1 && post_ok);
  /* these nodes saved no tensors, so a second backward may run; it
   * accumulates into .grad and fires the hook again */
  reset();
  CHECK(dp_backward(d, g, false) == 0 && grad0(x) == 32.0 && hx.fired == 2 && hx.grad_when_fired == 32.0);
  dp_remove_post_backward_hook(hid);
  dp_release(g), dp_release(a), dp_release(b), dp_release(c), dp_release(d), dp_release(x);
}

static void test_leaf_used_twice(void) {
  reset();
  dp_tensor *x = leaf(1.0), *w = leaf(1.0);
  hook_rec hx = {"x", 0, 0}, hw = {"w", 0, 0};
  dp_add_grad_hook(x, on_ready, &hx);
  dp_add_grad_hook(w, on_ready, &hw);
  /* p = 2 (x + x): two edges to the same leaf from one node;
   * q = 7 x: a third contribution from a later node;
   * r = p + q + w */
  dp_tensor *p = rec("P", 2, (dp_tensor *[]){x, x}, 2.0);
  dp_tensor *q = rec("Q", 1, &x, 7.0);
  dp_tensor *r = rec("R", 3, (dp_tensor *[]){p, q, w}, 1.0);
  dp_tensor *g = dp_full(DP_F64, 1, (int64_t[]){2}, 1.0, dp_cpu());
  CHECK(dp_backward(r, g, false) == 0);
  CHECK(grad0(x) == 11.0 && grad0(w) == 1.0);
  /* each hook fired once, x's only with its full gradient; w was ready
   * first (R runs before Q and P) */
  CHECK(hx.fired == 1 && hx.grad_when_fired == 11.0);
  CHECK(hw.fired == 1 && hw.grad_when_fired == 1.0);
  CHECK(n_hooks == 2 && strcmp(hook_order[0], "w") == 0 && strcmp(hook_order[1], "x") == 0);

  /* real ops: x * x gives 2x through one node with two edges to x */
  dp_tensor *y = dp_mul(x, x);
  dp_tensor *s = dp_sum(y, 0, NULL, false);
  dp_clear(&x->grad);
  CHECK(dp_backward(s, NULL, false) == 0 && grad0(x) == 2.0 && hx.fired == 2);
  dp_release(y), dp_release(s), dp_release(g), dp_release(p), dp_release(q), dp_release(r);
  dp_release(x), dp_release(w);
}

/* Leaves become ready in reverse order of their last use. */
static void test_hook_order(void) {
  reset();
  dp_tensor *w1 = leaf(1.0), *w2 = leaf(1.0), *w3 = leaf(1.0);
  hook_rec h1 = {"w1", 0, 0}, h2 = {"w2", 0, 0}, h3 = {"w3", 0, 0};
  dp_add_grad_hook(w1, on_ready, &h1);
  dp_add_grad_hook(w2, on_ready, &h2);
  dp_add_grad_hook(w3, on_ready, &h3);
  dp_tensor *l1 = rec("L1", 1, &w1, 1.0);                     /* layer 1 */
  dp_tensor *l2 = rec("L2", 2, (dp_tensor *[]){l1, w2}, 1.0); /* layer 2 */
  dp_tensor *l3 = rec("L3", 2, (dp_tensor *[]){l2, w3}, 1.0); /* layer 3 */
  dp_tensor *g = dp_full(DP_F64, 1, (int64_t[]){2}, 1.0, dp_cpu());
  CHECK(dp_backward(l3, g, false) == 0);
  CHECK(n_hooks == 3 && strcmp(hook_order[0], "w3") == 0 && strcmp(hook_order[1], "w2") == 0 &&
        strcmp(hook_order[2], "w1") == 0);
  dp_release(g), dp_release(l1), dp_release(l2), dp_release(l3), dp_release(w1), dp_release(w2), dp_release(w3);
}

/* A leaf whose only path gives it no gradient gets no .grad and no hook. */
static void test_no_gradient_no_hook(void) {
  reset();
  dp_tensor *x = leaf(1.0), *z = leaf(1.0);
  hook_rec hx = {"x", 0, 0}, hz = {"z", 0, 0};
  dp_add_grad_hook(x, on_ready, &hx);
  dp_add_grad_hook(z, on_ready, &hz);
  dp_tensor *y = rec("Y", 2, (dp_tensor *[]){x, z}, 1.0);
  y->grad_fn->i[1] = 2; /* input 1 (z) gets nothing */
  dp_tensor *g = dp_full(DP_F64, 1, (int64_t[]){2}, 1.0, dp_cpu());
  CHECK(dp_backward(y, g, false) == 0);
  CHECK(hx.fired == 1 && hz.fired == 0 && z->grad == NULL);
  dp_release(g), dp_release(y), dp_release(x), dp_release(z);
}

static void test_error_names_node(void) {
  reset();
  dp_tensor *x = leaf(1.0);
  hook_rec hx = {"x", 0, 0};
  dp_add_grad_hook(x, on_ready, &hx);
  dp_tensor *a = rec("Broken", 1, &x, 1.0);
  a->grad_fn->i[0] = 1;
  dp_tensor *b = rec("Fine", 1, &a, 1.0);
  int hid = dp_add_post_backward_hook(on_post, NULL);
  dp_tensor *g = dp_full(DP_F64, 1, (int64_t[]){2}, 1.0, dp_cpu());
  CHECK(dp_backward(b, g, false) == -1);
  CHECK(strstr(dp_errmsg(), "Broken") && strstr(dp_errmsg(), "refused on purpose"));
  CHECK(hx.fired == 0 && x->grad == NULL);
  CHECK(post_calls == 1 && !post_ok);
  /* the engine's scratch state was reset: an unrelated backward works */
  dp_tensor *y = dp_mul(x, x), *s = dp_sum(y, 0, NULL, false);
  CHECK(dp_backward(s, NULL, false) == 0 && grad0(x) == 2.0 && hx.fired == 1);
  dp_remove_post_backward_hook(hid);
  dp_release(g), dp_release(a), dp_release(b), dp_release(y), dp_release(s), dp_release(x);
}

int main(void) {
  test_diamond();
  test_leaf_used_twice();
  test_hook_order();
  test_no_gradient_no_hook();
  test_error_names_node();
  TEST_DONE();
}
