/* CTC loss (F.ctc_loss, nn.CTCLoss: lua/ddplua/nn/loss_ctc.lua reduces
 * what this returns): each sample's negative log-likelihood, with
 * autograd to the log-probabilities. The arguments are checked here, the
 * lengths and labels copied to host arrays (kept in one int64 CPU tensor
 * the node saves: offsets, input lengths, target lengths, the alpha
 * tables' offsets, then every sample's labels, 0-based), and the
 * recursions run by the CPU backend's kernel (cpu_ctc.c); tensors on
 * another device are copied to the CPU for it and the results copied back
 * (no device kernel yet). The forward's log_alpha tables are kept for the
 * backward when they take at most ALPHA_KEEP_BYTES (the backward then
 * computes beta only: 8.3 -> ~6 ms forward and backward for 16 utterances
 * of 100 steps and 30 labels), else computed again there. */
#include <stdlib.h>

#include "ops/op_util.h"

/* A sample's alignment tables hold input_length * (2 * target_length + 1)
 * doubles; past this many cells a sample is refused rather than allocated. */
#define CTC_MAX_CELLS ((int64_t)1 << 28)
#define ALPHA_KEEP_BYTES ((int64_t)64 << 20)

static dp_tensor *on_cpu(dp_scope *s, dp_tensor *t) {
  dp_tensor *c = dp_dev(t).type == DP_CPU ? t : dp_scope_add(s, dp_to(t, t->dtype, dp_cpu()));
  return c ? dp_scope_add(s, dp_contiguous_raw(c)) : NULL;
}

static int check_lengths(const dp_tensor *t, const char *what, int64_t n) {
  if (t->dtype != DP_I64 || t->ndim != 1 || t->shape[0] != n)
    return dp_error("ctc_loss: %s must be an int64 tensor of %" PRId64 " lengths (one a sample), got %s %s", what, n,
                    dp_dtype_name(t->dtype), SHAPE(t));
  return 0;
}

/* The host arrays of the arguments, checked, in one int64 tensor [4N + labels]; *cells: the alpha tables' total. */
static dp_tensor *host_meta(dp_scope *s, const dp_tensor *lp, dp_tensor *targets, dp_tensor *il_t, dp_tensor *tl_t,
                            int64_t blank, int64_t base, int64_t *max_len, int64_t *cells) {
  int64_t T = lp->shape[0], N = lp->shape[1], C = lp->shape[2];
  if (check_lengths(il_t, "input_lengths", N) || check_lengths(tl_t, "target_lengths", N)) return NULL;
  if (targets->dtype != DP_I64 || (targets->ndim != 1 && targets->ndim != 2) ||
      (targets->ndim == 2 && targets->shape[0] != N)) {
    dp_error("ctc_loss: targets must be int64, [N, S] padded or the N samples' labels concatenated, got %s "
             "%s for log_probs %s",
             dp_dtype_name(targets->dtype), SHAPE(targets), SHAPE(lp));
    return NULL;
  }
  dp_tensor *il = on_cpu(s, il_t), *tl = il ? on_cpu(s, tl_t) : NULL, *tg = tl ? on_cpu(s, targets) : NULL;
  if (!tg) return NULL;
  const int64_t *ilp = dp_data(il), *tlp = dp_data(tl), *tgp = dp_data(tg);
  int64_t total = 0, S = targets->ndim == 2 ? targets->shape[1] : 0;
  *max_len = 0, *cells = 0;
  for (int64_t n = 0; n < N; n++) {
    if (ilp[n] < 0 || ilp[n] > T) {
      dp_error("ctc_loss: input_lengths[%" PRId64 "] is %" PRId64 ", expected 0 .. %" PRId64 " (log_probs has %" PRId64
               " steps)",
               n + 1, ilp[n], T, T);
      return NULL;
    }
    if (tlp[n] < 0 || (targets->ndim == 2 && tlp[n] > S) || tlp[n] > dp_numel(tg)) {
      dp_error("ctc_loss: target_lengths[%" PRId64 "] is %" PRId64 ", expected 0 .. %" PRId64, n + 1, tlp[n],
               targets->ndim == 2 ? S : dp_numel(tg));
      return NULL;
    }
    if (ilp[n] > 0 && ilp[n] * (2 * tlp[n] + 1) > CTC_MAX_CELLS) {
      dp_error("ctc_loss: sample %" PRId64 " (%" PRId64 " steps, %" PRId64 " labels) needs more than 2^28 "
               "alignment cells",
               n + 1, ilp[n], tlp[n]);
      return NULL;
    }
    total += tlp[n];
    if (tlp[n] > *max_len) *max_len = tlp[n];
    if (*cells <= ALPHA_KEEP_BYTES) *cells += ilp[n] * (2 * tlp[n] + 1); /* (stops growing once past the bound) */
  }
  if (targets->ndim == 1 && total != dp_numel(tg)) {
    dp_error("ctc_loss: the target_lengths add up to %" PRId64 " but the concatenated targets hold %" PRId64, total,
             dp_numel(tg));
    return NULL;
  }
  dp_tensor *meta = dp_scope_add(s, dp_empty(DP_I64, 1, (int64_t[]){4 * N + total}, dp_cpu()));
  if (!meta) return NULL;
  int64_t *m = dp_data(meta), *labels = m + 4 * N, k = 0, cell = 0;
  for (int64_t n = 0; n < N; n++) {
    m[n] = k, m[N + n] = ilp[n], m[2 * N + n] = tlp[n], m[3 * N + n] = cell;
    if (cell <= ALPHA_KEEP_BYTES) cell += ilp[n] * (2 * tlp[n] + 1);
    const int64_t *src = targets->ndim == 2 ? tgp + n * S : tgp + k;
    for (int64_t j = 0; j < tlp[n]; j++) {
      int64_t v = src[j] - base;
      if (v < 0 || v >= C || v == blank) {
        dp_error("ctc_loss: sample %" PRId64 "'s label %" PRId64 " is %" PRId64 ", expected a class in %" PRId64
                 " .. %" PRId64 " other than the blank %" PRId64,
                 n + 1, j + 1, src[j], base, C - 1 + base, blank + base);
        return NULL;
      }
      labels[k++] = v;
    }
  }
  return meta;
}

static dp_ctc_args args_of(const dp_tensor *lp, const dp_tensor *meta, const dp_tensor *alpha, int64_t blank,
                           int64_t max_len, bool zi) {
  int64_t N = lp->shape[1];
  const int64_t *m = dp_data(meta);
  return (dp_ctc_args){.log_probs = lp,
                       .targets = m + 4 * N,
                       .offsets = m,
                       .input_lengths = m + N,
                       .target_lengths = m + 2 * N,
                       .blank = blank,
                       .max_target_length = max_len,
                       .zero_infinity = zi,
                       .alpha = alpha ? dp_data(alpha) : NULL,
                       .alpha_offsets = m + 3 * N};
}

static const dp_backend *cpu_kernels(void) {
  const dp_backend *be = dp_backend_get(DP_CPU);
  if (!be || !be->ctc_loss || !be->ctc_loss_backward) {
    dp_error("ctc_loss: no CPU kernel");
    return NULL;
  }
  return be;
}

static int ctc_backward(dp_node *n, dp_tensor **gout, dp_tensor **gin) {
  /* the saved log-probabilities are the forward's contiguous CPU copy; the gradient goes to the loss's device */
  dp_tensor *lpc = dp_node_saved(n, 0), *meta = dp_node_saved(n, 1), *alpha = n->i[3] ? dp_node_saved(n, 2) : NULL;
  DP_SCOPE(s);
  const dp_backend *be = cpu_kernels();
  dp_tensor *gl = be ? on_cpu(&s, gout[0]) : NULL;
  dp_tensor *g = gl ? dp_scope_add(&s, dp_empty(lpc->dtype, 3, lpc->shape, dp_cpu())) : NULL;
  if (!g) return -1;
  dp_ctc_args a = args_of(lpc, meta, alpha, n->i[0], n->i[2], n->i[1] != 0);
  if (be->ctc_loss_backward(g, gl, &a)) return -1;
  dp_device dev = dp_dev(gout[0]);
  dp_tensor *gd = dev.type == DP_CPU ? g : dp_scope_add(&s, dp_to(g, g->dtype, dev));
  if (!gd) return -1;
  gin[0] = dp_scope_keep(&s, gd);
  return 0;
}

dp_tensor *dp_ctc_loss(dp_tensor *log_probs, dp_tensor *targets, dp_tensor *input_lengths, dp_tensor *target_lengths,
                       int64_t blank, int64_t base, bool zero_infinity) {
  if ((log_probs->dtype != DP_F32 && log_probs->dtype != DP_F64) || log_probs->ndim != 3) {
    dp_error("ctc_loss: log_probs must be float32 or float64 [T, N, C], got %s %s", dp_dtype_name(log_probs->dtype),
             SHAPE(log_probs));
    return NULL;
  }
  int64_t C = log_probs->shape[2];
  if (blank < 0 || blank >= C) {
    dp_error("ctc_loss: blank %" PRId64 " is not a class of log_probs %s (expected %" PRId64 " .. %" PRId64 ")",
             blank + base, SHAPE(log_probs), base, C - 1 + base);
    return NULL;
  }
  DP_SCOPE(s);
  int64_t max_len, cells;
  dp_tensor *meta = host_meta(&s, log_probs, targets, input_lengths, target_lengths, blank, base, &max_len, &cells);
  const dp_backend *be = meta ? cpu_kernels() : NULL;
  dp_tensor *lpc = be ? on_cpu(&s, log_probs) : NULL;
  dp_tensor *loss = lpc ? dp_scope_add(&s, dp_empty(log_probs->dtype, 1, &log_probs->shape[1], dp_cpu())) : NULL;
  if (!loss) return NULL;
  /* the alpha tables, kept for the backward where one is coming and they are small enough */
  bool keep = dp_any_requires_grad(1, &log_probs) && cells * (int64_t)sizeof(double) <= ALPHA_KEEP_BYTES;
  dp_tensor *alpha = keep ? dp_scope_add(&s, dp_empty(DP_F64, 1, (int64_t[]){cells > 0 ? cells : 1}, dp_cpu())) : NULL;
  if (keep && !alpha) return NULL;
  dp_ctc_args a = args_of(lpc, meta, alpha, blank, max_len, zero_infinity);
  if (be->ctc_loss(loss, &a)) return NULL;
  if (dp_dev(log_probs).type != DP_CPU && !(loss = dp_scope_add(&s, dp_to(loss, loss->dtype, dp_dev(log_probs)))))
    return NULL;
  dp_scope_keep(&s, loss);
  if (dp_any_requires_grad(1, &log_probs)) {
    dp_node *n = dp_node_new("CtcLossBackward", ctc_backward, 1, &log_probs, 1);
    n->i[0] = blank, n->i[1] = zero_infinity, n->i[2] = max_len, n->i[3] = alpha != NULL;
    dp_node_save(n, lpc);
    dp_node_save(n, meta);
    if (alpha) dp_node_save(n, alpha);
    dp_node_attach(n, loss, 0);
    dp_node_release(n);
  }
  return loss;
}
