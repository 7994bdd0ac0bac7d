/* Optimizer steps as ops: in place on a parameter and its state, no
 * autograd. The checks every backend relies on (the gradient and the
 * state tensors match the parameter in shape, dtype and device; the
 * parameter and the state are contiguous, since they are updated in
 * place) live here, once; the Lua optimizers (lua/l_ops_optim.c) only walk
 * their parameter groups. `who` names the parameter in errors ("SGD:
 * parameter 3"). */
#include "ops/model_ops.h"
#include "ops/op_util.h"

static int check_grad(const char *who, const dp_tensor *p, const dp_tensor *g) {
  if (!dp_same_shape(p, g)) return dp_error("%s has shape %s but its gradient has shape %s", who, SHAPE(p), SHAPE(g));
  if (g->dtype != p->dtype)
    return dp_error("%s is %s but its gradient is %s", who, dp_dtype_name(p->dtype), dp_dtype_name(g->dtype));
  if (!dp_device_eq(dp_dev(p), dp_dev(g))) return dp_error("%s and its gradient are on different devices", who);
  if (!dp_is_contiguous(p)) return dp_error("%s is not contiguous (optimizers update parameters in place)", who);
  return 0;
}

/* A state tensor (NULL allowed where optional) must be a contiguous twin of p. */
static int check_state(const char *who, const char *name, const dp_tensor *s, const dp_tensor *p) {
  if (!s || (dp_same_shape(s, p) && s->dtype == p->dtype && dp_is_contiguous(s) && dp_device_eq(dp_dev(s), dp_dev(p))))
    return 0;
  return dp_error("%s: state '%s' is a %s %s tensor, expected a contiguous %s %s one like the parameter", who, name,
                  dp_dtype_name(s->dtype), SHAPE(s), dp_dtype_name(p->dtype), SHAPE(p));
}

int dp_sgd_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *buf, const dp_sgd_args *a) {
  if (check_grad(who, p, g) || check_state(who, "momentum_buffer", buf, p)) return -1;
  if (a->momentum != 0 && !buf) return dp_error("%s: momentum %g needs a momentum buffer", who, a->momentum);
  DP_SCOPE(s);
  dp_tensor *gc = dp_scope_add(&s, dp_contiguous_raw(g));
  if (!gc || dp_backend_of(p)->sgd_step(p, gc, buf, a)) return -1;
  dp_bump_version(p);
  if (buf) dp_bump_version(buf);
  return 0;
}

int dp_adam_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *m, dp_tensor *v, const dp_adam_args *a) {
  if (check_grad(who, p, g)) return -1;
  if (!m || !v) return dp_error("%s: Adam needs both moment tensors (exp_avg, exp_avg_sq)", who);
  if (check_state(who, "exp_avg", m, p) || check_state(who, "exp_avg_sq", v, p) ||
      check_state(who, "max_exp_avg_sq", a->max_exp_avg_sq, p))
    return -1;
  if (a->step < 1) return dp_error("%s: step must be >= 1, got %lld", who, (long long)a->step);
  DP_SCOPE(s);
  dp_tensor *gc = dp_scope_add(&s, dp_contiguous_raw(g));
  if (!gc || dp_backend_of(p)->adam_step(p, gc, m, v, a)) return -1;
  dp_bump_version(p);
  dp_bump_version(m);
  dp_bump_version(v);
  if (a->max_exp_avg_sq) dp_bump_version(a->max_exp_avg_sq);
  return 0;
}

/* ---- RMSprop / Adagrad / Adadelta ---- */
int dp_rmsprop_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *sq, dp_tensor *gavg, dp_tensor *buf,
                     const dp_rmsprop_args *a) {
  if (check_grad(who, p, g) || check_state(who, "square_avg", sq, p) || check_state(who, "grad_avg", gavg, p) ||
      check_state(who, "momentum_buffer", buf, p))
    return -1;
  if (!sq) return dp_error("%s: RMSprop needs its square_avg state", who);
  if (a->centered && !gavg) return dp_error("%s: centered RMSprop needs its grad_avg state", who);
  if (a->momentum != 0 && !buf) return dp_error("%s: momentum %g needs a momentum buffer", who, a->momentum);
  DP_SCOPE(s);
  dp_tensor *gc = dp_scope_add(&s, dp_contiguous_raw(g));
  if (!gc || dp_backend_of(p)->rmsprop_step(p, gc, sq, a->centered ? gavg : NULL, a->momentum != 0 ? buf : NULL, a))
    return -1;
  dp_bump_version(p);
  dp_bump_version(sq);
  if (gavg) dp_bump_version(gavg);
  if (buf) dp_bump_version(buf);
  return 0;
}

int dp_adagrad_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *sum, const dp_adagrad_args *a) {
  if (check_grad(who, p, g) || check_state(who, "sum", sum, p)) return -1;
  if (!sum) return dp_error("%s: Adagrad needs its sum state", who);
  DP_SCOPE(s);
  dp_tensor *gc = dp_scope_add(&s, dp_contiguous_raw(g));
  if (!gc || dp_backend_of(p)->adagrad_step(p, gc, sum, a)) return -1;
  dp_bump_version(p);
  dp_bump_version(sum);
  return 0;
}

int dp_adadelta_step_(const char *who, dp_tensor *p, dp_tensor *g, dp_tensor *sq, dp_tensor *acc,
                      const dp_adadelta_args *a) {
  if (check_grad(who, p, g) || check_state(who, "square_avg", sq, p) || check_state(who, "acc_delta", acc, p))
    return -1;
  if (!sq || !acc) return dp_error("%s: Adadelta needs its square_avg and acc_delta state", who);
  DP_SCOPE(s);
  dp_tensor *gc = dp_scope_add(&s, dp_contiguous_raw(g));
  if (!gc || dp_backend_of(p)->adadelta_step(p, gc, sq, acc, a)) return -1;
  dp_bump_version(p);
  dp_bump_version(sq);
  dp_bump_version(acc);
  return 0;
}

/* ---- clip_grad_norm_ ---- */
