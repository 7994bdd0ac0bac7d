/* NCCL collectives: each one is ordered after the compute stream's queued
 * work, issued on the group's communication stream, tracked until its
 * completion event fires (its tensors' storages kept alive meanwhile) and,
 * for synchronous calls, made to gate the compute stream. See nccl_group.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/nccl_group.h"

static const char *redop_name(dp_redop op) {
  static const char *names[] = {"sum", "avg", "max", "min", "prod"};
  return (unsigned)op < 5 ? names[op] : "?";
}

/* ---- work handles ---- */
static bool work_is_completed_(nccl_work *w) { return cudaEventQuery(w->f->done) != cudaErrorNotReady; }

static int work_wait(dp_work *wb) {
  nccl_work *w = (nccl_work *)wb;
  const dp_cu_ctx *ctx = dp_cu_enter(w->g->device);
  if (!ctx) return -1;
  pthread_mutex_lock(&w->g->mu);
  bool failed = w->g->failed[0] != 0 || (w->g->destroyed && !work_is_completed_(w));
  char msg[sizeof w->g->failed];
  snprintf(msg, sizeof msg, "%s", w->g->failed);
  pthread_mutex_unlock(&w->g->mu);
  if (failed)
    return dp_cu_error("%s (collective #%llu): %s", w->f->desc, (unsigned long long)w->f->seq,
                       msg[0] ? msg : "the process group was destroyed before it finished");
  return dp_cu_check(cudaStreamWaitEvent(ctx->stream, w->f->done, 0), w->f->desc, w->g->device);
}

static bool work_is_completed(dp_work *wb) {
  nccl_work *w = (nccl_work *)wb;
  return cudaEventQuery(w->f->done) != cudaErrorNotReady;
}

static void work_release(dp_work *wb) {
  nccl_work *w = (nccl_work *)wb;
  dp_nccl_inflight_unref(w->f);
  dp_nccl_group_unref(w->g);
  free(w);
}

/* ---- issuing collectives ---- */
typedef enum { C_ALL_REDUCE, C_BROADCAST, C_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER, C_SEND, C_RECV } coll_kind;

typedef struct {
  coll_kind kind;
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int peer; /* root, destination or source */
} coll;

static ncclResult_t issue_locked(nccl_pg *g, const coll *c) {
  switch (c->kind) {
  case C_ALL_REDUCE: return ncclAllReduce(c->send, c->recv, c->count, c->type, c->op, g->comm, g->stream);
  case C_BROADCAST: return ncclBroadcast(c->send, c->recv, c->count, c->type, c->peer, g->comm, g->stream);
  case C_REDUCE: return ncclReduce(c->send, c->recv, c->count, c->type, c->op, c->peer, g->comm, g->stream);
  case C_ALL_GATHER: return ncclAllGather(c->send, c->recv, c->count, c->type, g->comm, g->stream);
  case C_REDUCE_SCATTER: return ncclReduceScatter(c->send, c->recv, c->count, c->type, c->op, g->comm, g->stream);
  case C_SEND: return ncclSend(c->send, c->count, c->type, c->peer, g->comm, g->stream);
  default: return ncclRecv(c->recv, c->count, c->type, c->peer, g->comm, g->stream);
  }
}

static int map_dtype(dp_dtype dt, ncclDataType_t *out) {
  switch (dt) {
  case DP_F32: *out = ncclFloat32; return 0;
  case DP_F64: *out = ncclFloat64; return 0;
  case DP_BF16: *out = ncclBfloat16; return 0;
  case DP_F16: *out = ncclFloat16; return 0;
  case DP_I64: *out = ncclInt64; return 0;
  case DP_U8: *out = ncclUint8; return 0;
  default: return -1;
  }
}

static ncclRedOp_t map_op(dp_redop op) {
  switch (op) {
  case DP_RED_AVG: return ncclAvg;
  case DP_RED_MAX: return ncclMax;
  case DP_RED_MIN: return ncclMin;
  case DP_RED_PROD: return ncclProd;
  default: return ncclSum;
  }
}

/* A tensor a collective may use: contiguous, on the group's GPU. */
static int check_tensor(nccl_pg *g, const char *what, const char *role, const dp_tensor *t, ncclDataType_t *type) {
  dp_device d = t->storage->device;
  if (d.type != DP_CUDA || d.index != g->device) {
    char where[32];
    if (d.type == DP_CUDA) snprintf(where, sizeof where, "cuda:%d", d.index);
    else snprintf(where, sizeof where, "the cpu");
    return dp_cu_error("%s: the %s tensor is on %s but the nccl group of rank %d uses cuda:%d (move it with "
                       "t:to(\"cuda:%d\"))",
                       what, role, where, g->base.rank, g->device, g->device);
  }
  if (!dp_cu_contig(t)) return dp_cu_error("%s: the %s tensor must be contiguous", what, role);
  if (map_dtype(t->dtype, type))
    return dp_cu_error("%s: nccl cannot handle dtype %s", what, dp_cu_dtype_name(t->dtype));
  return 0;
}

/* DDPLUA_DEBUG: every rank compares what it issues with rank 0 through the
 * store; a mismatch is an error naming both sides. */
static int debug_check(nccl_pg *g, uint64_t seq, const char *desc) {
  char key[160];
  snprintf(key, sizeof key, "%s/dbg/%llu/0", g->base.prefix, (unsigned long long)seq);
  if (g->base.rank == 0) return dp_cu_api->store_set(g->base.store, key, desc, strlen(desc) + 1);
  void *val = NULL;
  size_t len = 0;
  if (dp_cu_api->store_get(g->base.store, key, &val, &len, g->base.timeout_ms)) return -1;
  int rc = 0;
  if (strcmp((const char *)val, desc) != 0)
    rc = dp_cu_error("nccl debug check: collective #%llu differs across ranks: rank %d issued '%s' but rank 0 "
                     "issued '%s'",
                     (unsigned long long)seq, g->base.rank, desc, (const char *)val);
  free(val);
  return rc;
}

static int run(nccl_pg *g, const coll *c, const char *desc, dp_tensor *t1, dp_tensor *t2, dp_work **work) {
  if (work) *work = NULL;
  const dp_cu_ctx *ctx = dp_cu_enter(g->device);
  if (!ctx) return -1;
  uint64_t seq = ++g->base.seq;
  if (g->base.debug && debug_check(g, seq, desc)) return -1;
  inflight *f = calloc(1, sizeof *f);
  if (!f) return dp_cu_error("nccl: out of host memory");
  cudaError_t e = cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(g->ready, ctx->stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(g->stream, g->ready, 0);
  if (e != cudaSuccess) {
    free(f);
    return dp_cu_check(e, "ordering a collective", g->device);
  }
  f->seq = seq;
  snprintf(f->desc, sizeof f->desc, "%s", desc);
  f->deadline = dp_nccl_now() + g->base.timeout_ms / 1000.0;
  pthread_mutex_lock(&g->mu);
  if (g->failed[0]) {
    char msg[sizeof g->failed];
    snprintf(msg, sizeof msg, "%s", g->failed);
    pthread_mutex_unlock(&g->mu);
    cudaEventDestroy(f->done);
    free(f);
    return dp_cu_error("%s: the group is unusable: %s", desc, msg);
  }
  ncclResult_t r = dp_nccl_settle_locked(g, g->comm, issue_locked(g, c), f->deadline, desc);
  if (r == ncclSuccess) e = cudaEventRecord(f->done, g->stream);
  if (r != ncclSuccess || e != cudaSuccess) {
    int rc = r == ncclInProgress ? dp_cu_error("%s", g->failed)
             : r != ncclSuccess  ? dp_nccl_error(g, r, desc)
                                 : dp_cu_check(e, desc, g->device);
    if (r != ncclSuccess && r != ncclInvalidArgument && r != ncclInvalidUsage && r != ncclInProgress) {
      char msg[400];
      snprintf(msg, sizeof msg, "nccl: %s on rank %d failed: %s", desc, g->base.rank, ncclGetErrorString(r));
      dp_nccl_fail_locked(g, msg);
    }
    pthread_mutex_unlock(&g->mu);
    cudaEventDestroy(f->done);
    free(f);
    return rc;
  }
  f->keep[0] = t1 ? t1->storage : NULL;
  f->keep[1] = t2 ? t2->storage : NULL;
  for (int i = 0; i < 2; i++)
    if (f->keep[i]) dp_cu_api->storage_retain(f->keep[i]);
  f->refs = work ? 2 : 1;
  f->next = g->head;
  g->head = f;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  if (!work) return dp_cu_check(cudaStreamWaitEvent(ctx->stream, f->done, 0), desc, g->device);
  nccl_work *w = calloc(1, sizeof *w);
  if (!w) {
    dp_nccl_inflight_unref(f);
    return dp_cu_error("nccl: out of host memory");
  }
  w->base.wait = work_wait;
  w->base.is_completed = work_is_completed;
  w->base.release = work_release;
  pthread_mutex_lock(&dp_nccl_life_mu);
  g->refs++;
  pthread_mutex_unlock(&dp_nccl_life_mu);
  w->g = g;
  w->f = f;
  *work = &w->base;
  return 0;
}

/* ---- the collectives ---- */
static int nccl_all_reduce(dp_pg *pg, dp_tensor *t, dp_redop op, dp_work **work) {
  nccl_pg *g = (nccl_pg *)pg;
  coll c = {.kind = C_ALL_REDUCE, .op = map_op(op)};
  if (check_tensor(g, "all_reduce", "input", t, &c.type)) return -1;
  if (op == DP_RED_AVG && !(t->dtype == DP_F32 || t->dtype == DP_F64 || t->dtype == DP_BF16 || t->dtype == DP_F16))
    return dp_cu_error("all_reduce: \"avg\" needs a floating point tensor, got %s", dp_cu_dtype_name(t->dtype));
  c.send = c.recv = dp_cu_ptr(t);
  c.count = (size_t)dp_cu_numel(t);
  char desc[112];
  snprintf(desc, sizeof desc, "all_reduce %s %s x%zu", redop_name(op), dp_cu_dtype_name(t->dtype), c.count);
  return run(g, &c, desc, t, NULL, work);
}

static int nccl_broadcast(dp_pg *pg, dp_tensor *t, int root, dp_work **work) {
  nccl_pg *g = (nccl_pg *)pg;
  coll c = {.kind = C_BROADCAST, .peer = root};
  if (check_tensor(g, "broadcast", "input", t, &c.type)) return -1;
  if (root < 0 || root >= g->base.size)
    return dp_cu_error("broadcast: source rank %d is not in the group (ranks 0..%d)", root, g->base.size - 1);
  c.send = c.recv = dp_cu_ptr(t);
  c.count = (size_t)dp_cu_numel(t);
  char desc[112];
  snprintf(desc, sizeof desc, "broadcast %s x%zu from %d", dp_cu_dtype_name(t->dtype), c.count, root);
  return run(g, &c, desc, t, NULL, work);
}

static int nccl_reduce(dp_pg *pg, dp_tensor *t, int root, dp_redop op, dp_work **work) {
  nccl_pg *g = (nccl_pg *)pg;
  coll c = {.kind = C_REDUCE, .peer = root, .op = map_op(op)};
  if (check_tensor(g, "reduce", "input", t, &c.type)) return -1;
  if (root < 0 || root >= g->base.size)
    return dp_cu_error("reduce: destination rank %d is not in the group (ranks 0..%d)", root, g->base.size - 1);
  if (op == DP_RED_AVG && !(t->dtype == DP_F32 || t->dtype == DP_F64 || t->dtype == DP_BF16 || t->dtype == DP_F16))
    return dp_cu_error("reduce: \"avg\" needs a floating point tensor, got %s", dp_cu_dtype_name(t->dtype));
  c.send = c.recv = dp_cu_ptr(t);
  c.count = (size_t)dp_cu_numel(t);
  char desc[112];
  snprintf(desc, sizeof desc, "reduce %s %s x%zu to %d", redop_name(op), dp_cu_dtype_name(t->dtype), c.count, root);
  return run(g, &c, desc, t, NULL, work);
}

static int nccl_all_gather(dp_pg *pg, dp_tensor *out, dp_tensor *in, dp_work **work) {
  nccl_pg *g = (nccl_pg *)pg;
  coll c = {.kind = C_ALL_GATHER};
  ncclDataType_t t2;
  if (check_tensor(g, "all_gather", "input", in, &c.type) || check_tensor(g, "all_gather", "output", out, &t2))
    return -1;
  int64_t n = dp_cu_numel(in);
  if (out->dtype != in->dtype || dp_cu_numel(out) != n * g->base.size)
    return dp_cu_error("all_gather: the output must hold %d x %lld %s elements (the world size times the input), "
                       "got %lld %s",
                       g->base.size, (long long)n, dp_cu_dtype_name(in->dtype), (long long)dp_cu_numel(out),
                       dp_cu_dtype_name(out->dtype));
  c.send = dp_cu_ptr(in);
  c.recv = dp_cu_ptr(out);
  c.count = (size_t)n;
  char desc[112];
  snprintf(desc, sizeof desc, "all_gather %s x%zu", dp_cu_dtype_name(in->dtype), c.count);
  return run(g, &c, desc, out, in, work);
}

static int nccl_reduce_scatter(dp_pg *pg, dp_tensor *out, dp_tensor *in, dp_redop op, dp_work **work) {
  nccl_pg *g = (nccl_pg *)pg;
  coll c = {.kind = C_REDUCE_SCATTER, .op = map_op(op)};
  ncclDataType_t t2;
  if (check_tensor(g, "reduce_scatter", "input", in, &c.type) || check_tensor(g, "reduce_scatter", "output", out, &t2))
    return -1;
  int64_t n = dp_cu_numel(out);
  if (out->dtype != in->dtype || dp_cu_numel(in) != n * g->base.size)
    return dp_cu_error("reduce_scatter: the input must hold %d x %lld %s elements (the world size times the output), "
                       "got %lld %s",
                       g->base.size, (long long)n, dp_cu_dtype_name(out->dtype), (long long)dp_cu_numel(in),
                       dp_cu_dtype_name(in->dtype));
  if (op == DP_RED_AVG && !(in->dtype == DP_F32 || in->dtype == DP_F64 || in->dtype == DP_BF16 || in->dtype == DP_F16))
    return dp_cu_error("reduce_scatter: \"avg\" needs a floating point tensor, got %s", dp_cu_dtype_name(in->dtype));
  c.send = dp_cu_ptr(in);
  c.recv = dp_cu_ptr(out);
  c.count = (size_t)n;
  char desc[112];
  snprintf(desc, sizeof desc, "reduce_scatter %s %s x%zu", redop_name(op), dp_cu_dtype_name(in->dtype), c.count);
  return run(g, &c, desc, out, in, work);
}

static int nccl_p2p(dp_pg *pg, dp_tensor *t, int peer, bool send) {
  nccl_pg *g = (nccl_pg *)pg;
  const char *what = send ? "send" : "recv";
  coll c = {.kind = send ? C_SEND : C_RECV, .peer = peer};
  if (check_tensor(g, what, send ? "input" : "output", t, &c.type)) return -1;
  if (peer < 0 || peer >= g->base.size || peer == g->base.rank)
    return dp_cu_error("%s: peer rank %d is not another rank of the group (ranks 0..%d, this is %d)", what, peer,
                       g->base.size - 1, g->base.rank);
  c.send = c.recv = dp_cu_ptr(t);
  c.count = (size_t)dp_cu_numel(t);
  char desc[112];
  snprintf(desc, sizeof desc, "%s %s x%zu %s %d", what, dp_cu_dtype_name(t->dtype), c.count, send ? "to" : "from",
           peer);
  return run(g, &c, desc, t, NULL, NULL);
}
static int nccl_send(dp_pg *pg, dp_tensor *t, int dst) { return nccl_p2p(pg, t, dst, true); }
static int nccl_recv(dp_pg *pg, dp_tensor *t, int src) { return nccl_p2p(pg, t, src, false); }

/* A one-element all-reduce, then the host waits for it (barrier is the one
 * collective that blocks the host, as in PyTorch). */
static int nccl_barrier(dp_pg *pg) {
  nccl_pg *g = (nccl_pg *)pg;
  coll c = {.kind = C_ALL_REDUCE,
            .send = g->barrier_buf,
            .recv = g->barrier_buf,
            .count = 1,
            .type = ncclFloat32,
            .op = ncclSum};
  dp_work *w = NULL;
  if (run(g, &c, "barrier", NULL, NULL, &w)) return -1;
  double deadline = dp_nccl_now() + g->base.timeout_ms / 1000.0 + 1.0; /* the watchdog acts first */
  int rc = 0;
  while (!work_is_completed(w)) {
    pthread_mutex_lock(&g->mu);
    bool failed = g->failed[0] != 0;
    pthread_mutex_unlock(&g->mu);
    if (failed || dp_nccl_now() > deadline) break;
    dp_nccl_nap();
  }
  pthread_mutex_lock(&g->mu);
  if (g->failed[0]) rc = dp_cu_error("barrier: %s", g->failed);
  else if (!work_is_completed(w)) rc = dp_cu_error("barrier on rank %d did not complete", g->base.rank);
  pthread_mutex_unlock(&g->mu);
  if (!rc) rc = dp_cu_take_errors();
  work_release(w);
  return rc;
}

const dp_pg_ops dp_nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .barrier = nccl_barrier,
    .send = nccl_send,
    .recv = nccl_recv,
    .new_group = dp_nccl_new_group,
    .alloc_shared = NULL,
    .destroy = dp_nccl_destroy,
};
