/* The cpu process group's entry points (dp_pg_ops): argument checks,
 * staging of CUDA tensors through contiguous host buffers (the collective
 * itself only sees host memory), the DDPLUA_DEBUG cross-check through the
 * store, and the group's fatal-error state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "distributed/pg_cpu.h"
#include "distributed/reduce_kern.h"
#include "ops/ops.h"

static const char *const kind_names[OP_NKINDS] = {"all_reduce",     "broadcast", "reduce", "all_gather",
                                                  "reduce_scatter", "barrier",   "send",   "recv"};

const char *op_kind_name(op_kind k) { return k >= 0 && k < OP_NKINDS ? kind_names[k] : "?"; }

void coll_desc_str(const coll_desc *d, char *buf, size_t n) {
  const char *kind = op_kind_name((op_kind)d->kind);
  if (d->kind == OP_BARRIER) {
    snprintf(buf, n, "%s()", kind);
    return;
  }
  char red[32] = "", root[32] = "";
  if (d->redop >= 0) snprintf(red, sizeof red, "%s, ", dp_redop_name((dp_redop)d->redop));
  if (d->root >= 0) snprintf(root, sizeof root, ", %s %d", d->kind == OP_BROADCAST ? "src" : "dst", d->root);
  snprintf(buf, n, "%s(%s%s, %lld%s)", kind, red, dp_dtype_name((dp_dtype)d->dtype), (long long)d->count, root);
}

void cpu_op_ctx(const cpu_op *op, char *buf, size_t n) {
  const coll_desc *d = &op->d;
  const char *kind = op_kind_name((op_kind)d->kind);
  if (d->kind == OP_SEND || d->kind == OP_RECV) {
    snprintf(buf, n, "%s %s rank %d (%s, %lld elements)", kind, d->kind == OP_SEND ? "to" : "from", d->root,
             dp_dtype_name((dp_dtype)d->dtype), (long long)d->count);
    return;
  }
  if (d->kind == OP_BARRIER) {
    snprintf(buf, n, "barrier #%llu", (unsigned long long)op->seq);
    return;
  }
  char red[32] = "";
  if (d->redop >= 0) snprintf(red, sizeof red, "%s, ", dp_redop_name((dp_redop)d->redop));
  snprintf(buf, n, "%s #%llu (%s%s, %lld elements)", kind, (unsigned long long)op->seq, red,
           dp_dtype_name((dp_dtype)d->dtype), (long long)d->count);
}

void cpu_fail(cpu_pg *g, const char *err) {
  pthread_mutex_lock(&g->broken_mu);
  if (!atomic_load(&g->broken)) {
    snprintf(g->broken_msg, sizeof g->broken_msg, "%s", err);
    atomic_store(&g->broken, true);
    if (g->seg) shm_abort(g->seg, g->base.global_rank, err);
    tcp_mesh_shutdown(g);
  }
  pthread_mutex_unlock(&g->broken_mu);
}

/* ---- staging ---- */

/* Sets *host to t itself (CPU) or to a contiguous host copy of a device
 * tensor (filled from it when copy_in). */
static int stage(dp_tensor *t, bool copy_in, dp_tensor **host, dp_tensor **dev) {
  if (!dp_is_contiguous(t)) return dp_error("expected a contiguous tensor (the Lua layer makes tensors contiguous)");
  if (dp_dev(t).type == DP_CPU) {
    dp_retain(t);
    *host = t;
    *dev = NULL;
    return 0;
  }
  dp_tensor *h = dp_empty(t->dtype, t->ndim, t->shape, dp_cpu());
  if (!h || (copy_in && dp_copy_(h, t))) {
    dp_release(h);
    return -1;
  }
  dp_retain(t);
  *host = h;
  *dev = t;
  return 0;
}

static bool writes_t(const cpu_op *op) {
  return op->d.kind == OP_ALL_REDUCE || op->d.kind == OP_BROADCAST || op->d.kind == OP_REDUCE || op->d.kind == OP_RECV;
}

int cpu_op_finish(cpu_op *op, int rc) {
  if (!rc && op->dev_t && writes_t(op)) rc = dp_copy_(op->dev_t, op->t);
  if (!rc && op->dev_out) rc = dp_copy_(op->dev_out, op->out);
  if (!rc && op->t && writes_t(op) && !op->dev_t) dp_bump_version(op->t);
  if (!rc && op->out && !op->dev_out) dp_bump_version(op->out);
  dp_clear(&op->t);
  dp_clear(&op->out);
  dp_clear(&op->dev_t);
  dp_clear(&op->dev_out);
  return rc;
}

/* ---- DDPLUA_DEBUG: every rank compares what each rank called ---- */

static int debug_check(cpu_pg *g, const cpu_op *op) {
  char mine[160], key[160], ctx[256];
  coll_desc_str(&op->d, mine, sizeof mine);
  int me = g->base.rank, n = g->base.size;
  snprintf(key, sizeof key, "%s/dbg/%llu/%d", g->base.prefix, (unsigned long long)op->seq, me);
  if (dp_store_set(g->base.store, key, mine, strlen(mine))) return -1;
  if (op->seq > 2) { /* every rank has read my key of two collectives ago */
    snprintf(key, sizeof key, "%s/dbg/%llu/%d", g->base.prefix, (unsigned long long)op->seq - 2, me);
    dp_store_delete(g->base.store, key);
  }
  char first[160] = "";
  int64_t deadline = pg_now_ms() + g->base.timeout_ms;
  for (int j = 0; j < n; j++) {
    char *val = NULL;
    size_t len;
    snprintf(key, sizeof key, "%s/dbg/%llu/%d", g->base.prefix, (unsigned long long)op->seq, j);
    int64_t left = deadline - pg_now_ms();
    if (j == me) {
      val = dp_xstrdup(mine);
    } else if (dp_store_get(g->base.store, key, (void **)&val, &len, left > 0 ? (int)left : 1)) {
      cpu_op_ctx(op, ctx, sizeof ctx);
      dp_pg_blame(g->granks[j]);
      return dp_error("%s timed out after %.1f s on rank %d: rank %d never arrived (DDPLUA_DEBUG check)", ctx,
                      g->base.timeout_ms / 1000.0, g->base.global_rank, g->granks[j]);
    }
    if (j == 0) snprintf(first, sizeof first, "%s", val);
    else if (strcmp(first, val) != 0) {
      dp_error("collective mismatch (DDPLUA_DEBUG): rank %d called %s but rank %d called %s", g->granks[0], first,
               g->granks[j], val);
      free(val);
      return -1;
    }
    free(val);
  }
  return 0;
}

/* ---- issuing ---- */

static int issue(cpu_pg *g, cpu_op *op, dp_work **work) {
  if (work) *work = NULL;
  if (atomic_load(&g->broken)) {
    dp_error("%s", g->broken_msg);
    return cpu_op_finish(op, -1);
  }
  if (op->d.kind != OP_SEND && op->d.kind != OP_RECV) {
    op->seq = ++g->base.seq;
    if (g->base.debug && g->base.size > 1 && debug_check(g, op)) {
      cpu_fail(g, dp_errmsg());
      return cpu_op_finish(op, -1);
    }
  }
  return cpu_submit(g, op, work);
}

static int check_root(cpu_pg *g, int root, const char *what) {
  if (root < 0 || root >= g->base.size)
    return dp_error("%s %d is out of range for a group of %d ranks", what, root, g->base.size);
  return 0;
}

static int check_reduce(dp_redop op, dp_dtype dt, const char *name) {
  if (dp_redop_supported(op, dt)) return 0;
  if (op == DP_RED_AVG && dt == DP_I64)
    return dp_error("%s: avg needs a floating-point tensor, got int64 (use sum and divide)", name);
  return dp_error("%s: %s is not supported for %s tensors (float32, float64 and int64 are)", name, dp_redop_name(op),
                  dp_dtype_name(dt));
}

static cpu_op new_op(op_kind k, int redop, dp_dtype dt, int64_t count, int root_global, int peer) {
  cpu_op o;
  memset(&o, 0, sizeof o);
  o.d = (coll_desc){(int32_t)k, redop, (int32_t)dt, root_global, count};
  o.peer = peer;
  return o;
}

static int cpu_all_reduce(dp_pg *pg, dp_tensor *t, dp_redop op, dp_work **work) {
  cpu_pg *g = (cpu_pg *)pg;
  if (check_reduce(op, t->dtype, "all_reduce")) return -1;
  cpu_op o = new_op(OP_ALL_REDUCE, (int)op, t->dtype, dp_numel(t), -1, -1);
  if (stage(t, true, &o.t, &o.dev_t)) return -1;
  return issue(g, &o, work);
}

static int cpu_broadcast(dp_pg *pg, dp_tensor *t, int root, dp_work **work) {
  cpu_pg *g = (cpu_pg *)pg;
  if (check_root(g, root, "broadcast: src")) return -1;
  cpu_op o = new_op(OP_BROADCAST, -1, t->dtype, dp_numel(t), g->granks[root], root);
  if (stage(t, root == pg->rank, &o.t, &o.dev_t)) return -1;
  return issue(g, &o, work);
}

static int cpu_reduce(dp_pg *pg, dp_tensor *t, int root, dp_redop op, dp_work **work) {
  cpu_pg *g = (cpu_pg *)pg;
  if (check_root(g, root, "reduce: dst") || check_reduce(op, t->dtype, "reduce")) return -1;
  cpu_op o = new_op(OP_REDUCE, (int)op, t->dtype, dp_numel(t), g->granks[root], root);
  if (stage(t, true, &o.t, &o.dev_t)) return -1;
  return issue(g, &o, work);
}

static int check_pair(const dp_tensor *a, const dp_tensor *b, const char *name) {
  if (a->dtype != b->dtype)
    return dp_error("%s: the output is %s but the input is %s", name, dp_dtype_name(a->dtype), dp_dtype_name(b->dtype));
  return 0;
}

static int cpu_all_gather(dp_pg *pg, dp_tensor *out, dp_tensor *in, dp_work **work) {
  cpu_pg *g = (cpu_pg *)pg;
  if (check_pair(out, in, "all_gather")) return -1;
  if (dp_numel(out) != dp_numel(in) * pg->size)
    return dp_error("all_gather: the output has %lld elements, expected %d x %lld", (long long)dp_numel(out), pg->size,
                    (long long)dp_numel(in));
  cpu_op o = new_op(OP_ALL_GATHER, -1, in->dtype, dp_numel(in), -1, -1);
  if (stage(in, true, &o.t, &o.dev_t) || stage(out, false, &o.out, &o.dev_out)) {
    cpu_op_finish(&o, -1);
    return -1;
  }
  return issue(g, &o, work);
}

static int cpu_reduce_scatter(dp_pg *pg, dp_tensor *out, dp_tensor *in, dp_redop op, dp_work **work) {
  cpu_pg *g = (cpu_pg *)pg;
  if (check_pair(out, in, "reduce_scatter") || check_reduce(op, in->dtype, "reduce_scatter")) return -1;
  if (dp_numel(in) != dp_numel(out) * pg->size)
    return dp_error("reduce_scatter: the input has %lld elements, expected %d x %lld", (long long)dp_numel(in),
                    pg->size, (long long)dp_numel(out));
  cpu_op o = new_op(OP_REDUCE_SCATTER, (int)op, in->dtype, dp_numel(out), -1, -1);
  if (stage(in, true, &o.t, &o.dev_t) || stage(out, false, &o.out, &o.dev_out)) {
    cpu_op_finish(&o, -1);
    return -1;
  }
  return issue(g, &o, work);
}

static int cpu_barrier(dp_pg *pg) {
  cpu_op o = new_op(OP_BARRIER, -1, DP_I64, 0, -1, -1);
  return issue((cpu_pg *)pg, &o, NULL);
}

static int p2p(dp_pg *pg, dp_tensor *t, int peer, op_kind k) {
  cpu_pg *g = (cpu_pg *)pg;
  const char *what = k == OP_SEND ? "send: dst" : "recv: src";
  if (check_root(g, peer, what)) return -1;
  if (peer == pg->rank) return dp_error("%s %d is this rank itself", what, g->granks[peer]);
  cpu_op o = new_op(k, -1, t->dtype, dp_numel(t), g->granks[peer], peer);
  if (stage(t, k == OP_SEND, &o.t, &o.dev_t)) return -1;
  return issue(g, &o, NULL);
}

static int cpu_send(dp_pg *pg, dp_tensor *t, int dst) { return p2p(pg, t, dst, OP_SEND); }
static int cpu_recv(dp_pg *pg, dp_tensor *t, int src) { return p2p(pg, t, src, OP_RECV); }

int cpu_new_group(dp_pg *pg, const int *ranks, int n, dp_pg **out);
dp_storage *cpu_alloc_shared(dp_pg *pg, size_t nbytes);
void cpu_destroy(dp_pg *pg);
void cpu_shutdown(dp_pg *pg);

const dp_pg_ops dp_pg_cpu_ops = {
    .name = "cpu",
    .all_reduce = cpu_all_reduce,
    .broadcast = cpu_broadcast,
    .reduce = cpu_reduce,
    .all_gather = cpu_all_gather,
    .reduce_scatter = cpu_reduce_scatter,
    .barrier = cpu_barrier,
    .send = cpu_send,
    .recv = cpu_recv,
    .new_group = cpu_new_group,
    .alloc_shared = cpu_alloc_shared,
    .destroy = cpu_destroy,
    .shutdown = cpu_shutdown,
};
