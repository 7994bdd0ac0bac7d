/* Connectionist temporal classification on the CPU (backend.h's ctc_loss
 * and ctc_loss_backward; ops/ctc.c checks the arguments and runs other
 * devices' tensors here). Graves et al.'s recursions over the extended
 * target l' (a blank before, between and after the labels: 2L + 1
 * states) in log space, in double for float32 and float64 alike, one
 * sample a task over the pool's threads:
 *
 *   alpha_0(0) = lp_0(blank), alpha_0(1) = lp_0(l'_1)
 *   alpha_t(s) = lp_t(l'_s) + lse(alpha_{t-1}(s), alpha_{t-1}(s-1),
 *                                 alpha_{t-1}(s-2) where l'_s is a label other than l'_{s-2})
 *   nll = -lse(alpha_{T-1}(S-1), alpha_{T-1}(S-2))
 *
 * and beta the same from the end (including lp_t, as PyTorch's). The
 * gradient is PyTorch 1.13's: for t < T, grad_t(c) = (exp(lp_t(c)) -
 * exp(lse_{s: l'_s = c}(alpha_t(s) + beta_t(s)) + nll - lp_t(c))) * g,
 * which is the gradient with respect to the inputs of a log_softmax that
 * made lp (PyTorch's CTC backward returns that as the log-probabilities'
 * gradient; through log_softmax's backward both give the same logits'
 * gradient), 0 for t >= T; zero_infinity zeroes an impossible sample's
 * loss and gradient. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"

typedef struct {
  const dp_ctc_args *a;
  dp_tensor *out;         /* forward: the losses [N]; backward: the gradient [T, N, C] */
  const dp_tensor *gloss; /* backward: the losses' gradient [N] */
  atomic_bool failed;     /* a task ran out of memory */
} ctc_ctx;

/* A sample's extended target: the class of each state (labels at odd s, the blank between) and whether a state may
 * be entered from two states back (a label unlike the one before it), made once per sample. */
typedef struct {
  int64_t S;
  int64_t *cls;
  unsigned char *skip;
  double *lp;            /* one step's log-probabilities, as doubles */
  double *tb, *tc, *tlp; /* a step's second and third terms and each state's log-probability (float32's rows) */
} ext_target;

static int ext_make(ext_target *e, const dp_ctc_args *a, int64_t n, int64_t C) {
  int64_t L = a->target_lengths[n];
  e->S = 2 * L + 1;
  e->cls = malloc(sizeof(int64_t) * (size_t)e->S + sizeof(double) * (size_t)(C + 3 * e->S) + (size_t)e->S);
  if (!e->cls) return -1;
  e->lp = (double *)(e->cls + e->S);
  e->tb = e->lp + C, e->tc = e->tb + e->S, e->tlp = e->tc + e->S;
  e->skip = (unsigned char *)(e->tlp + e->S);
  const int64_t *lab = a->targets + a->offsets[n];
  for (int64_t s = 0; s < e->S; s++) {
    e->cls[s] = s % 2 ? lab[s / 2] : a->blank;
    e->skip[s] = s % 2 && s >= 2 && lab[s / 2] != lab[s / 2 - 1];
  }
  return 0;
}

/* step t of sample n's log-probabilities into e->lp */
static void load_step(ext_target *e, const dp_ctc_args *a, int64_t t, int64_t n) {
  const dp_tensor *lp = a->log_probs;
  int64_t N = lp->shape[1], C = lp->shape[2], i = (t * N + n) * C;
  if (lp->dtype == DP_F64) {
    const double *p = (const double *)dp_data(lp) + i;
    for (int64_t c = 0; c < C; c++) e->lp[c] = p[c];
  } else {
    const float *p = (const float *)dp_data(lp) + i;
    for (int64_t c = 0; c < C; c++) e->lp[c] = p[c];
  }
}

/* log(exp(x) + exp(y)) and log(exp(x) + exp(y) + exp(z)), -inf when all are: the largest term's exp is 1, so
 * the two-term form costs one exp and a log1p, the three-term one two exps and a log (libm's exp and log are most
 * of the recursion's time; a blank's state and a repeated label's take two terms). For float32 log-probabilities
 * (f32) those are libm's float functions on the differences (in [-inf, 0]) and the sum of the terms (in [1, 3]), as
 * PyTorch's float32 kernel computes, the states themselves staying double. Float32 inputs take these only for the
 * final sum; their steps go to the vector unit whole (step_rows: cpu_vec.h lse3_row). */
static double lse2(double x, double y, bool f32) {
  double m = x > y ? x : y, o = x > y ? y : x;
  if (o == -INFINITY) return m;
  return m + (f32 ? (double)log1pf(expf((float)(o - m))) : log1p(exp(o - m)));
}
static double lse3(double x, double y, double z, bool f32) {
  if (z == -INFINITY) return lse2(x, y, f32);
  double m = x > y ? x : y;
  m = m > z ? m : z;
  if (m == -INFINITY) return -INFINITY;
  if (f32) {
    float t = (x == m ? 1.0f : expf((float)(x - m))) + (y == m ? 1.0f : expf((float)(y - m))) +
              (z == m ? 1.0f : expf((float)(z - m)));
    return m + (double)logf(t);
  }
  double t = (x == m ? 1.0 : exp(x - m)) + (y == m ? 1.0 : exp(y - m)) + (z == m ? 1.0 : exp(z - m));
  return m + log(t);
}

/* One step of the recursion for float32 log-probabilities, all states at once in the vector unit
 * (cpu_vec.h lse3_row): cur[s] = lp(l'_s) + lse(p[s], p[s + dir], p[s + 2 dir] where the skip is allowed), dir -1
 * for alpha (from the step before), +1 for beta (from the step after). */
static void step_rows(ext_target *e, double *cur, const double *p, int dir) {
  int64_t S = e->S;
  for (int64_t s = 0; s < S; s++) {
    int64_t s1 = s + dir, s2 = s + 2 * dir;
    e->tb[s] = s1 >= 0 && s1 < S ? p[s1] : -INFINITY;
    e->tc[s] = s2 >= 0 && s2 < S && e->skip[dir < 0 ? s : s2] ? p[s2] : -INFINITY;
    e->tlp[s] = e->lp[e->cls[s]];
  }
  dp_cpu_vec_get()->lse3_row(cur, p, e->tb, e->tc, e->tlp, S);
}

/* log_alpha [T][S] of sample n; returns the negative log-likelihood */
static double forward_alpha(const dp_ctc_args *a, int64_t n, ext_target *e, double *la) {
  int64_t T = a->input_lengths[n], S = e->S;
  bool f32 = a->log_probs->dtype == DP_F32;
  if (T == 0) return S == 1 ? 0.0 : INFINITY; /* an empty input aligns only with an empty target */
  load_step(e, a, 0, n);
  for (int64_t s = 0; s < S; s++) la[s] = s < 2 ? e->lp[e->cls[s]] : -INFINITY;
  for (int64_t t = 1; t < T; t++) {
    const double *prev = la + (t - 1) * S;
    double *cur = la + t * S;
    load_step(e, a, t, n);
    if (f32) {
      step_rows(e, cur, prev, -1);
      continue;
    }
    for (int64_t s = 0; s < S; s++) {
      double v = s == 0       ? prev[0]
                 : e->skip[s] ? lse3(prev[s], prev[s - 1], prev[s - 2], f32)
                              : lse2(prev[s], prev[s - 1], f32);
      cur[s] = v + e->lp[e->cls[s]];
    }
  }
  const double *last = la + (T - 1) * S;
  return -(S > 1 ? lse2(last[S - 1], last[S - 2], false) : last[0]);
}

/* log_beta [T][S] of sample n (with lp_t, as PyTorch's) */
static void backward_beta(const dp_ctc_args *a, int64_t n, ext_target *e, double *lb) {
  int64_t T = a->input_lengths[n], S = e->S;
  bool f32 = a->log_probs->dtype == DP_F32;
  double *last = lb + (T - 1) * S;
  load_step(e, a, T - 1, n);
  for (int64_t s = 0; s < S; s++) last[s] = s >= S - 2 ? e->lp[e->cls[s]] : -INFINITY;
  for (int64_t t = T - 2; t >= 0; t--) {
    const double *next = lb + (t + 1) * S;
    double *cur = lb + t * S;
    load_step(e, a, t, n);
    if (f32) {
      step_rows(e, cur, next, 1);
      continue;
    }
    for (int64_t s = 0; s < S; s++) {
      double v = s + 1 == S                    ? next[s]
                 : s + 2 < S && e->skip[s + 2] ? lse3(next[s], next[s + 1], next[s + 2], f32)
                                               : lse2(next[s], next[s + 1], f32);
      cur[s] = v + e->lp[e->cls[s]];
    }
  }
}

static void loss_tasks(void *vctx, int64_t lo, int64_t hi) {
  ctc_ctx *c = vctx;
  const dp_ctc_args *a = c->a;
  int64_t C = a->log_probs->shape[2];
  for (int64_t n = lo; n < hi; n++) {
    int64_t T = a->input_lengths[n];
    ext_target e;
    double *la = NULL;
    bool kept = a->alpha != NULL; /* the table the backward reads, or a scratch one */
    if (ext_make(&e, a, n, C) ||
        !(la = kept ? a->alpha + a->alpha_offsets[n] : malloc(sizeof(double) * (size_t)(T > 0 ? T * e.S : 1)))) {
      free(e.cls);
      atomic_store(&c->failed, true);
      return;
    }
    double nll = forward_alpha(a, n, &e, la);
    if (!kept) free(la);
    free(e.cls);
    if (a->zero_infinity && isinf(nll)) nll = 0;
    if (c->out->dtype == DP_F64) ((double *)dp_data(c->out))[n] = nll;
    else ((float *)dp_data(c->out))[n] = (float)nll;
  }
}

static void grad_store(dp_tensor *g, int64_t i, double v) {
  if (g->dtype == DP_F64) ((double *)dp_data(g))[i] = v;
  else ((float *)dp_data(g))[i] = (float)v;
}

/* Step t's gradient row: each class's posterior sum_{s: l'_s = c} exp(alpha + beta), as acc[c] * exp(mx) with mx
 * the step's largest alpha + beta (one exp a state), then PyTorch's formula. */
static void grad_step(dp_tensor *g, int64_t row, const ext_target *e, const double *la, const double *lb, double nll,
                      double gl, double *acc, int64_t C) {
  double mx = -INFINITY;
  for (int64_t s = 0; s < e->S; s++) mx = la[s] + lb[s] > mx ? la[s] + lb[s] : mx;
  for (int64_t k = 0; k < C; k++) acc[k] = 0;
  if (mx > -INFINITY)
    for (int64_t s = 0; s < e->S; s++) acc[e->cls[s]] += exp(la[s] + lb[s] - mx);
  for (int64_t k = 0; k < C; k++) {
    double lp = e->lp[k];
    double post = acc[k] > 0 ? acc[k] * exp(mx + nll - lp) : 0.0;
    grad_store(g, row + k, (exp(lp) - post) * gl);
  }
}

static void grad_tasks(void *vctx, int64_t lo, int64_t hi) {
  ctc_ctx *c = vctx;
  const dp_ctc_args *a = c->a;
  dp_tensor *g = c->out;
  int64_t Tmax = g->shape[0], N = g->shape[1], C = g->shape[2];
  for (int64_t n = lo; n < hi; n++) {
    int64_t T = a->input_lengths[n];
    double gl = c->gloss->dtype == DP_F64 ? ((const double *)dp_data(c->gloss))[n]
                                          : (double)((const float *)dp_data(c->gloss))[n];
    for (int64_t t = T; t < Tmax; t++)
      for (int64_t k = 0; k < C; k++) grad_store(g, (t * N + n) * C + k, 0.0);
    if (T == 0) continue;
    ext_target e;
    double *buf = NULL;
    if (ext_make(&e, a, n, C) || !(buf = malloc(sizeof(double) * (size_t)(2 * T * e.S + C)))) {
      free(e.cls);
      atomic_store(&c->failed, true);
      return;
    }
    /* the forward's alpha where it was kept (its nll from the last step), else computed again */
    double *la = a->alpha ? a->alpha + a->alpha_offsets[n] : buf, *lb = buf + T * e.S, *acc = lb + T * e.S;
    double nll;
    if (a->alpha) {
      const double *last = la + (T - 1) * e.S;
      nll = -(e.S > 1 ? lse2(last[e.S - 1], last[e.S - 2], false) : last[0]);
    } else {
      nll = forward_alpha(a, n, &e, la);
    }
    bool zero = a->zero_infinity && isinf(nll);
    if (!zero) backward_beta(a, n, &e, lb);
    for (int64_t t = 0; t < T; t++) {
      int64_t row = (t * N + n) * C;
      if (zero) {
        for (int64_t k = 0; k < C; k++) grad_store(g, row + k, 0.0);
        continue;
      }
      load_step(&e, a, t, n);
      grad_step(g, row, &e, la + t * e.S, lb + t * e.S, nll, gl, acc, C);
    }
    free(buf);
    free(e.cls);
  }
}

/* samples per task: a sample's cells T * S are the work */
static int64_t grain(const dp_ctc_args *a) {
  const dp_tensor *lp = a->log_probs;
  int64_t cells = lp->shape[0] * (2 * (a->max_target_length) + 1) + 1;
  return DP_GRAIN_MEMORY / (16 * cells) + 1;
}

int dp_cpu_ctc_loss(dp_tensor *loss, const dp_ctc_args *a) {
  ctc_ctx c = {.a = a, .out = loss};
  atomic_init(&c.failed, false);
  dp_cpu_parallel_for(a->log_probs->shape[1], grain(a), 1, loss_tasks, &c);
  return atomic_load(&c.failed) ? dp_error("ctc_loss: out of memory for a sample's alignment table") : 0;
}

int dp_cpu_ctc_loss_backward(dp_tensor *grad, const dp_tensor *gloss, const dp_ctc_args *a) {
  ctc_ctx c = {.a = a, .out = grad, .gloss = gloss};
  atomic_init(&c.failed, false);
  dp_cpu_parallel_for(a->log_probs->shape[1], grain(a), 1, grad_tasks, &c);
  return atomic_load(&c.failed) ? dp_error("ctc_loss: out of memory for a sample's alignment tables") : 0;
}
