#include "distributed/ddp_reducer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "ops/ops.h"

typedef struct {
  dp_storage *storage;
  dp_tensor *flat; /* 1-d view of the whole bucket */
  int *params;     /* indices into r->params */
  int n_params;
  int pending; /* params whose gradient is not ready yet in this backward */
  dp_work *work;
  bool launched;
  double launch_time;
} bucket;

typedef struct {
  dp_reducer *r;
  int index;
} hook_ctx;

struct dp_reducer {
  dp_pg *pg;
  int n;
  dp_tensor **params; /* retained, requires_grad ones only */
  char **names;
  int *orig_index; /* position among the parameters the caller passed */
  int *bucket_of;  /* per param */
  int64_t *off;    /* per param: its gradient's offset in its bucket, in elements */
  bool *ready;     /* per param, this backward */
  bool *unused;    /* per param, this backward: no gradient on this rank (find_unused_parameters) */
  int *hook_ids;
  hook_ctx *hctx;
  bucket *buckets;
  int n_buckets;
  int next_launch;    /* buckets launch in order */
  int launched_async; /* of them, started from gradient hooks during backward */
  bool sync, find_unused, any_ready;
  bool force; /* dp_pg_force_collectives() when the reducer was made */
  int post_hook_id;
  char error[512]; /* first failure inside a hook, reported after backward */
  dp_reducer_stats stats;
  int n_caller_params;
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void set_error(dp_reducer *r) {
  if (!r->error[0]) snprintf(r->error, sizeof r->error, "%s", dp_errmsg());
}

/* Launches ready buckets in order. From a gradient hook (in_hook) they go
 * to the group's communication thread and backward continues; a CPU
 * bucket that is the last one is left to the post-backward finalisation,
 * which runs it on this thread: nothing is left to overlap with by then,
 * and a hand-off to the communication thread only adds two wake-ups on a
 * machine whose cores all compute. */
static void launch_ready(dp_reducer *r, bool in_hook) {
  while (r->next_launch < r->n_buckets) {
    bucket *b = &r->buckets[r->next_launch];
    if (b->pending > 0) return;
    bool last = r->next_launch == r->n_buckets - 1;
    bool cpu = !b->flat || dp_dev(b->flat).type == DP_CPU; /* no flat: one rank, nothing to send */
    if (in_hook && last && cpu) return;
    dp_work **w = in_hook ? &b->work : NULL;
    /* one rank: the average is the gradient itself (unless a test forces the collective) */
    if (!r->error[0] && (r->pg->size > 1 || r->force) && r->pg->ops->all_reduce(r->pg, b->flat, DP_RED_AVG, w))
      set_error(r);
    b->launched = true;
    b->launch_time = now_ms();
    if (in_hook) r->launched_async++;
    r->next_launch++;
  }
}

/* p's .grad becomes the view of bucket storage st at off (elements) and
 * holds what .grad held: its values, or zeros (marked zero-pending, so the
 * next accumulation overwrites instead of adding) when it had none. */
static int grad_to_view(dp_tensor *p, dp_storage *st, int64_t off) {
  dp_tensor *view = dp_from_storage(st, p->dtype, p->ndim, p->shape, NULL, off);
  if (!view) return -1;
  bool has = p->grad && !p->grad_zero_pending;
  if (has ? dp_copy_(view, p->grad) : dp_fill_(view, 0.0)) {
    dp_release(view);
    return -1;
  }
  dp_release(p->grad);
  p->grad = view;
  p->grad_zero_pending = !has;
  p->keep_grad_buf = true;
  return 0;
}

/* What the all-reduce averages is the bucket, so a parameter's gradient must
 * be its bucket view when its bucket launches. A user who dropped or
 * replaced .grad since (p.grad = nil, p.grad = t: PyTorch's set_to_none and
 * assignment) has a separate tensor that this backward accumulated into;
 * its values move into the view (zeros when there is none) and .grad is the
 * view again. Without this the parameter silently kept its own rank's
 * gradient, and its stale bucket slot went into every other rank's average. */
static int rebind_grad(dp_reducer *r, int i) {
  bucket *b = &r->buckets[r->bucket_of[i]];
  if (!b->storage) return 0; /* one rank: plain gradients, no buckets */
  dp_tensor *p = r->params[i], *g = p->grad;
  if (g && g->storage == b->storage && g->offset == r->off[i] && g->dtype == p->dtype && dp_is_contiguous(g) &&
      dp_same_shape(g, p))
    return 0;
  if (grad_to_view(p, b->storage, r->off[i])) return -1;
  p->grad_zero_pending = false; /* the slot is about to hold the average, zeros included */
  return 0;
}

static void grad_ready(dp_tensor *leaf, void *ctx) {
  hook_ctx *h = ctx;
  dp_reducer *r = h->r;
  (void)leaf;
  if (!r->sync || r->ready[h->index]) return;
  r->ready[h->index] = true;
  if (rebind_grad(r, h->index)) set_error(r);
  if (!r->any_ready) r->stats.last_backward_start_ms = now_ms(); /* the first gradient of this backward */
  r->any_ready = true;
  bucket *b = &r->buckets[r->bucket_of[h->index]];
  if (--b->pending == 0) launch_ready(r, true);
}

static void reset(dp_reducer *r) {
  for (int i = 0; i < r->n; i++) r->ready[i] = false;
  for (int k = 0; k < r->n_buckets; k++) {
    bucket *b = &r->buckets[k];
    b->pending = b->n_params;
    b->launched = false;
    if (b->work) {
      dp_work_release(b->work);
      b->work = NULL;
    }
  }
  r->next_launch = 0;
  r->launched_async = 0;
  r->any_ready = false;
  r->error[0] = 0;
}

/* find_unused_parameters: a parameter no rank gave a gradient in this
 * backward has none, as in PyTorch, whose optimizers then skip it (a zero
 * gradient would still move it through momentum and weight decay). Which
 * ones those are takes one more all-reduce, of a used flag per parameter,
 * after the buckets' (the same order on every rank); their bucket slots
 * hold the average of zeros and are marked zero-pending, which reads as no
 * gradient. Alone, the local flags are the answer and the slots stay. */
static int mark_globally_unused(dp_reducer *r) {
  bool alone = r->pg->size == 1 && !r->force;
  if (alone || r->n_buckets == 0 || !r->buckets[0].flat) {
    for (int i = 0; i < r->n; i++)
      if (r->unused[i] && r->params[i]->grad) r->params[i]->grad_zero_pending = true;
    return 0;
  }
  /* every rank takes part, whether or not it has unused parameters itself */
  int64_t n = r->n;
  dp_tensor *used = dp_zeros(DP_F32, 1, &n, dp_cpu());
  if (!used) return -1;
  float *u = dp_data(used);
  for (int i = 0; i < r->n; i++) u[i] = r->unused[i] ? 0.0f : 1.0f;
  /* on the buckets' device (nccl reduces CUDA tensors only) and back */
  dp_device dev = dp_dev(r->buckets[0].flat);
  bool on_cpu = dp_device_eq(dev, dp_cpu());
  dp_tensor *d = on_cpu ? used : dp_to(used, DP_F32, dev);
  int rc = d ? r->pg->ops->all_reduce(r->pg, d, DP_RED_SUM, NULL) : -1;
  dp_tensor *sums = rc ? NULL : on_cpu ? used : dp_to(d, DP_F32, dp_cpu());
  if (!rc && !sums) rc = -1;
  for (int i = 0; !rc && i < r->n; i++)
    if (r->unused[i] && ((const float *)dp_data(sums))[i] == 0.0f) r->params[i]->grad_zero_pending = true;
  if (!on_cpu) {
    dp_release(d);
    dp_release(sums);
  }
  dp_release(used);
  return rc;
}

static int finalize(void *ctx, bool ok) {
  dp_reducer *r = ctx;
  if (!r->sync || !r->any_ready) { /* not our backward, or no_sync */
    if (r->any_ready) reset(r);
    return 0;
  }
  r->stats.backward_passes++;
  double end = now_ms();
  if (r->stats.last_backward_start_ms > 0) r->stats.backward_ms_total += end - r->stats.last_backward_start_ms;
  int in_bw = r->launched_async;
  int rc = 0;
  if (ok && !r->error[0]) {
    /* parameters that never got a gradient */
    int missing = 0;
    char names[400] = "";
    size_t k = 0;
    for (int i = 0; i < r->n; i++) {
      r->unused[i] = false;
      if (r->ready[i]) continue;
      if (r->find_unused) {
        /* unused here, unless no_sync backwards accumulated into it */
        dp_tensor *p = r->params[i];
        r->unused[i] = !p->grad || p->grad_zero_pending;
        if (dp_grad_materialize(p)) set_error(r);
        /* its bucket slot must hold it (or zeros) before the average; alone
         * there is no slot, and a parameter without a gradient keeps none */
        if (rebind_grad(r, i)) set_error(r);
        r->ready[i] = true;
        bucket *b = &r->buckets[r->bucket_of[i]];
        b->pending--;
        continue;
      }
      if (missing++ < 8 && k < sizeof names - 64)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", missing > 1 ? ", " : "", r->names[i]);
    }
    if (missing) {
      snprintf(r->error, sizeof r->error,
               "DistributedDataParallel: %d parameter(s) received no gradient in this backward: %s%s. Pass "
               "find_unused_parameters=true if parts of the model are unused in some steps, or make sure all "
               "forward outputs take part in the loss",
               missing, names, missing > 8 ? ", ..." : "");
    } else {
      launch_ready(r, false);
    }
  }
  r->stats.launched_in_backward = in_bw;
  r->stats.launched_after = r->next_launch - in_bw;
  r->stats.first_launch_before_end_ms = in_bw > 0 ? end - r->buckets[0].launch_time : 0.0;
  /* wait for everything launched, even after an error, so no collective
   * is left running against freed state */
  for (int b = 0; b < r->n_buckets; b++) {
    if (r->buckets[b].work && dp_work_wait(r->buckets[b].work)) set_error(r);
  }
  if (ok && r->find_unused && !r->error[0] && mark_globally_unused(r)) set_error(r);
  if (r->error[0]) rc = dp_error("%s", r->error);
  else r->stats.synced_passes++;
  r->stats.finalize_ms_total += now_ms() - end;
  reset(r);
  return rc;
}

static int build_buckets(dp_reducer *r, size_t cap, size_t first_cap) {
  r->buckets = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->buckets);
  /* reverse order; a new bucket when dtype/device change or the cap is hit */
  int cur = -1;
  size_t cur_bytes = 0;
  dp_dtype cur_dt = DP_F32;
  dp_device cur_dev = dp_cpu();
  for (int i = r->n - 1; i >= 0; i--) {
    dp_tensor *p = r->params[i];
    size_t bytes = (size_t)dp_numel(p) * dp_elsize(p);
    size_t limit = cur <= 0 ? first_cap : cap;
    if (cur < 0 || p->dtype != cur_dt || !dp_device_eq(dp_dev(p), cur_dev) ||
        (cur_bytes > 0 && cur_bytes + bytes > limit)) {
      cur++;
      cur_bytes = 0;
      cur_dt = p->dtype;
      cur_dev = dp_dev(p);
    }
    r->bucket_of[i] = cur;
    cur_bytes += (bytes + 63) & ~(size_t)63; /* each gradient 64-byte aligned */
  }
  r->n_buckets = cur + 1;
  for (int k = 0; k < r->n_buckets; k++) {
    bucket *b = &r->buckets[k];
    b->params = dp_xcalloc((size_t)r->n, sizeof *b->params);
  }
  /* member lists in backward order (reverse registration) */
  for (int i = r->n - 1; i >= 0; i--) {
    bucket *b = &r->buckets[r->bucket_of[i]];
    b->params[b->n_params++] = i;
  }
  /* One rank, collectives not forced: the average is the gradient itself,
   * so the buckets hold no memory and the gradients stay plain tensors
   * (zero_grad drops them, each backward writes fresh ones): views into a
   * bucket would make every gradient an extra accumulation pass (those
   * the producing op cannot write in place) and keep a second copy of
   * every gradient alive for nothing. */
  if (r->pg->size == 1 && !r->force) return 0;
  for (int k = 0; k < r->n_buckets; k++) {
    bucket *b = &r->buckets[k];
    dp_tensor *p0 = r->params[b->params[0]];
    size_t es = dp_elsize(p0), total = 0;
    for (int j = 0; j < b->n_params; j++) {
      dp_tensor *p = r->params[b->params[j]];
      total += ((size_t)dp_numel(p) * es + 63) & ~(size_t)63;
    }
    if (total == 0) total = 64;
    dp_storage *st = NULL;
    if (dp_dev(p0).type == DP_CPU && r->pg->ops->alloc_shared) {
      st = r->pg->ops->alloc_shared(r->pg, total);
      if (st) r->stats.shared_buckets = true;
    }
    if (!st) st = dp_storage_new(total, dp_dev(p0));
    if (!st) return -1;
    b->storage = st;
    int64_t nel = (int64_t)(total / es);
    b->flat = dp_from_storage(st, p0->dtype, 1, &nel, NULL, 0);
    if (!b->flat || dp_fill_(b->flat, 0.0)) return -1;
    /* gradients become views into the bucket; existing values are kept (they
     * used to be marked zero-pending after the copy, so wrapping a model in
     * DDP silently zeroed the gradients it had) */
    size_t off = 0;
    for (int j = 0; j < b->n_params; j++) {
      dp_tensor *p = r->params[b->params[j]];
      r->off[b->params[j]] = (int64_t)(off / es);
      if (grad_to_view(p, st, r->off[b->params[j]])) return -1;
      off += ((size_t)dp_numel(p) * es + 63) & ~(size_t)63;
    }
    r->stats.bucket_bytes_total += total;
  }
  return 0;
}

dp_reducer *dp_reducer_new(dp_pg *pg, dp_tensor *const *params, const char *const *names, int n, size_t bucket_bytes,
                           size_t first_bucket_bytes, bool find_unused) {
  dp_reducer *r = dp_xcalloc(1, sizeof *r);
  r->pg = pg;
  dp_pg_hold(pg); /* the group may be destroyed before the reducer is collected */
  r->sync = true;
  r->find_unused = find_unused;
  r->force = dp_pg_force_collectives();
  r->n_caller_params = n;
  r->params = dp_xcalloc((size_t)(n ? n : 1), sizeof *r->params);
  r->names = dp_xcalloc((size_t)(n ? n : 1), sizeof *r->names);
  r->orig_index = dp_xcalloc((size_t)(n ? n : 1), sizeof *r->orig_index);
  for (int i = 0; i < n; i++) {
    if (!params[i]->requires_grad) continue;
    if (!dp_is_leaf(params[i])) {
      dp_error("DistributedDataParallel: parameter %s is not a leaf tensor", names[i]);
      goto fail;
    }
    dp_retain(params[i]);
    r->params[r->n] = params[i];
    r->names[r->n] = dp_xstrdup(names[i]);
    r->orig_index[r->n] = i;
    r->n++;
  }
  r->bucket_of = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->bucket_of);
  r->off = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->off);
  r->ready = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->ready);
  r->unused = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->unused);
  r->hook_ids = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->hook_ids);
  r->hctx = dp_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->hctx);
  if (build_buckets(r, bucket_bytes, first_bucket_bytes)) goto fail;
  for (int i = 0; i < r->n; i++) {
    r->hctx[i] = (hook_ctx){r, i};
    r->hook_ids[i] = dp_add_grad_hook(r->params[i], grad_ready, &r->hctx[i]);
  }
  r->post_hook_id = dp_add_post_backward_hook(finalize, r);
  if (r->post_hook_id < 0) goto fail; /* too many live reducers: an error, not an abort */
  r->stats.n_buckets = r->n_buckets;
  r->stats.n_params = r->n;
  reset(r);
  return r;
fail:
  dp_reducer_free(r);
  return NULL;
}

void dp_reducer_free(dp_reducer *r) {
  if (!r) return;
  if (r->post_hook_id) dp_remove_post_backward_hook(r->post_hook_id);
  for (int i = 0; i < r->n; i++) {
    if (r->hook_ids && r->hook_ids[i]) dp_remove_grad_hook(r->params[i], r->hook_ids[i]);
    /* the gradients keep their bucket memory alive through their views */
    if (r->params[i]) r->params[i]->keep_grad_buf = false;
    dp_release(r->params[i]);
    free(r->names[i]);
  }
  for (int k = 0; k < r->n_buckets; k++) {
    dp_work_release(r->buckets[k].work);
    dp_release(r->buckets[k].flat);
    dp_storage_release(r->buckets[k].storage);
    free(r->buckets[k].params);
  }
  free(r->buckets);
  free(r->params);
  free(r->names);
  free(r->orig_index);
  free(r->bucket_of);
  free(r->off);
  free(r->ready);
  free(r->unused);
  free(r->hook_ids);
  free(r->hctx);
  if (r->pg) dp_pg_unhold(r->pg);
  free(r);
}

void dp_reducer_set_sync(dp_reducer *r, bool sync) { r->sync = sync; }
bool dp_reducer_get_sync(const dp_reducer *r) { return r->sync; }
dp_reducer_stats dp_reducer_get_stats(const dp_reducer *r) { return r->stats; }

int dp_reducer_bucket_of(const dp_reducer *r, int param_index) {
  for (int i = 0; i < r->n; i++)
    if (r->orig_index[i] == param_index) return r->bucket_of[i];
  return -1;
}
