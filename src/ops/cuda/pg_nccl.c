/* The NCCL process group (dist/pg.h; how it behaves is documented at
 * dp_pg_nccl_new there).
 *
 * One communicator per group, created in NCCL's nonblocking mode so that no
 * call can hang past the group's deadline: every NCCL call is followed by
 * polling ncclCommGetAsyncError until it leaves ncclInProgress, with the
 * deadline checked in between. Collectives run on the group's
 * communication stream, which first waits (by event) for the compute
 * stream; a completion event recorded after the collective is what the
 * compute stream (sync calls, work->wait) and the watchdog wait on. Each
 * queued collective keeps its tensors' storages alive until that event
 * fires, so the caching allocator never hands their memory to anyone else
 * while NCCL still reads or writes it.
 *
 * The watchdog thread polls the queued collectives: finished ones are
 * dropped, a failed or overdue one aborts the communicator (ncclCommAbort
 * ends the hung kernels, so nothing waits forever) and posts an error that
 * the next call into the plugin raises. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/cuda/cuda_host.h"

typedef struct inflight {
  cudaEvent_t done;
  dp_storage *keep[2];
  uint64_t seq;
  char desc[112];
  double deadline;
  int refs; /* the watchdog list, plus a work handle */
  struct inflight *next;
} inflight;

typedef struct {
  dp_pg base;
  ncclComm_t comm;
  int device;
  cudaStream_t stream; /* communication */
  cudaEvent_t ready;   /* compute stream -> communication stream */
  float *barrier_buf;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t watchdog;
  bool watchdog_running, stop;
  inflight *head;
  bool aborted;
  char failed[700]; /* why the group is unusable; empty while healthy */
} nccl_pg;

typedef struct {
  dp_work base;
  nccl_pg *g;
  inflight *f;
} nccl_work;

static const dp_pg_ops nccl_ops;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void) {
  struct timespec ts = {0, 200000}; /* 0.2 ms */
  nanosleep(&ts, NULL);
}

static const char *redop_name(dp_redop op) {
  static const char *names[] = {"sum", "avg", "max", "min", "prod"};
  return (unsigned)op < 5 ? names[op] : "?";
}

/* Marks the group failed, aborts the communicator and posts the error for
 * every thread (mu held). */
static void fail_locked(nccl_pg *g, const char *msg) {
  if (!g->failed[0]) snprintf(g->failed, sizeof g->failed, "%s", msg);
  if (!g->aborted && g->comm) {
    ncclCommAbort(g->comm);
    g->aborted = true;
  }
  dp_cu_post_error("%s", g->failed);
}

/* Polls a nonblocking NCCL call to completion (mu held). */
static ncclResult_t settle_locked(nccl_pg *g, ncclComm_t comm, ncclResult_t r, double deadline, const char *what) {
  while (r == ncclInProgress) {
    ncclResult_t st = ncclSuccess;
    r = ncclCommGetAsyncError(comm, &st);
    if (r == ncclSuccess) r = st;
    if (r == ncclInProgress && now_s() > deadline) {
      char msg[400];
      snprintf(msg, sizeof msg,
               "nccl: %s on rank %d did not finish within %.1f s (a rank is missing or stuck); the communicator "
               "was aborted",
               what, g->base.rank, g->base.timeout_ms / 1000.0);
      fail_locked(g, msg);
      return ncclInProgress;
    }
    if (r == ncclInProgress) nap();
  }
  return r;
}

static int nccl_fail(nccl_pg *g, ncclResult_t r, const char *what) {
  const char *last = ncclGetLastError(g->comm);
  return dp_cu_error("nccl: %s on rank %d (cuda:%d) failed: %s%s%s%s", what, g->base.rank, g->device,
                     ncclGetErrorString(r), last && *last ? " (" : "", last && *last ? last : "",
                     last && *last ? ")" : "");
}

static void inflight_unref_locked(inflight *f) {
  if (--f->refs > 0) return;
  for (int i = 0; i < 2; i++)
    if (f->keep[i]) dp_cu_api->storage_release(f->keep[i]);
  cudaEventDestroy(f->done);
  free(f);
}

/* ---- watchdog ---- */
static void *watchdog_main(void *arg) {
  nccl_pg *g = arg;
  cudaSetDevice(g->device);
  pthread_mutex_lock(&g->mu);
  for (;;) {
    for (inflight **pp = &g->head; *pp;) {
      inflight *f = *pp;
      cudaError_t q = cudaEventQuery(f->done);
      if (q == cudaErrorNotReady && !g->aborted && now_s() > f->deadline) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "nccl: %s (collective #%llu of this group) on rank %d did not complete within %.1f s: a rank never "
                 "joined it or is stuck (rerun with DDPLUA_DEBUG=1 to compare collectives across ranks); the "
                 "communicator was aborted",
                 f->desc, (unsigned long long)f->seq, g->base.rank, g->base.timeout_ms / 1000.0);
        fail_locked(g, msg);
      }
      if (q == cudaErrorNotReady) {
        pp = &f->next;
        continue;
      }
      if (q != cudaSuccess && !g->failed[0]) {
        char msg[400];
        snprintf(msg, sizeof msg, "nccl: %s (collective #%llu) on rank %d failed on the device: %s", f->desc,
                 (unsigned long long)f->seq, g->base.rank, cudaGetErrorString(q));
        fail_locked(g, msg);
      }
      *pp = f->next;
      inflight_unref_locked(f);
    }
    if (g->comm && !g->aborted) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(g->comm, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
        char msg[500];
        const char *last = ncclGetLastError(g->comm);
        snprintf(msg, sizeof msg, "nccl: the communicator of rank %d reported an error: %s%s%s; it was aborted",
                 g->base.rank, ncclGetErrorString(st), last && *last ? ": " : "", last && *last ? last : "");
        fail_locked(g, msg);
      }
    }
    if (g->stop && !g->head) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (g->head) pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    else if (!g->stop) pthread_cond_wait(&g->cv, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* ---- work handles ---- */
static int work_wait(dp_work *wb) {
  nccl_work *w = (nccl_work *)wb;
  const dp_cu_ctx *ctx = dp_cu_enter(w->g->device);
  if (!ctx) return -1;
  pthread_mutex_lock(&w->g->mu);
  bool failed = w->g->failed[0] != 0;
  char msg[sizeof w->g->failed];
  snprintf(msg, sizeof msg, "%s", w->g->failed);
  pthread_mutex_unlock(&w->g->mu);
  if (failed) return dp_cu_error("%s (collective #%llu): %s", w->f->desc, (unsigned long long)w->f->seq, msg);
  return dp_cu_check(cudaStreamWaitEvent(ctx->stream, w->f->done, 0), w->f->desc, w->g->device);
}

static bool work_is_completed(dp_work *wb) {
  nccl_work *w = (nccl_work *)wb;
  return cudaEventQuery(w->f->done) != cudaErrorNotReady;
}

static void work_release(dp_work *wb) {
  nccl_work *w = (nccl_work *)wb;
  pthread_mutex_lock(&w->g->mu);
  inflight_unref_locked(w->f);
  pthread_mutex_unlock(&w->g->mu);
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
  if (d.type != DP_CUDA || d.index != g->device)
    return dp_cu_error("%s: the %s tensor is on %s%d but the nccl group of rank %d uses cuda:%d (move it with "
                       "t:to(\"cuda:%d\"))",
                       what, role, d.type == DP_CUDA ? "cuda:" : "the cpu", d.type == DP_CUDA ? d.index : 0,
                       g->base.rank, g->device, g->device);
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
  f->deadline = now_s() + g->base.timeout_ms / 1000.0;
  pthread_mutex_lock(&g->mu);
  if (g->failed[0]) {
    char msg[sizeof g->failed];
    snprintf(msg, sizeof msg, "%s", g->failed);
    pthread_mutex_unlock(&g->mu);
    cudaEventDestroy(f->done);
    free(f);
    return dp_cu_error("%s: the group is unusable: %s", desc, msg);
  }
  ncclResult_t r = settle_locked(g, g->comm, issue_locked(g, c), f->deadline, desc);
  if (r == ncclSuccess) e = cudaEventRecord(f->done, g->stream);
  if (r != ncclSuccess || e != cudaSuccess) {
    int rc = r == ncclInProgress ? dp_cu_error("%s", g->failed)
             : r != ncclSuccess  ? nccl_fail(g, r, desc)
                                 : dp_cu_check(e, desc, g->device);
    if (r != ncclSuccess && r != ncclInvalidArgument && r != ncclInvalidUsage && r != ncclInProgress) {
      char msg[400];
      snprintf(msg, sizeof msg, "nccl: %s on rank %d failed: %s", desc, g->base.rank, ncclGetErrorString(r));
      fail_locked(g, msg);
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
  if (!w) return dp_cu_error("nccl: out of host memory");
  w->base.wait = work_wait;
  w->base.is_completed = work_is_completed;
  w->base.release = work_release;
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
  if (check_tensor(g, "reduce_scatter", "input", in, &c.type) ||
      check_tensor(g, "reduce_scatter", "output", out, &t2))
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
  coll c = {.kind = C_ALL_REDUCE, .send = g->barrier_buf, .recv = g->barrier_buf, .count = 1, .type = ncclFloat32,
            .op = ncclSum};
  dp_work *w = NULL;
  if (run(g, &c, "barrier", NULL, NULL, &w)) return -1;
  double deadline = now_s() + g->base.timeout_ms / 1000.0 + 1.0; /* the watchdog acts first */
  int rc = 0;
  while (!work_is_completed(w)) {
    pthread_mutex_lock(&g->mu);
    bool failed = g->failed[0] != 0;
    pthread_mutex_unlock(&g->mu);
    if (failed || now_s() > deadline) break;
    nap();
  }
  pthread_mutex_lock(&g->mu);
  if (g->failed[0]) rc = dp_cu_error("barrier: %s", g->failed);
  else if (!work_is_completed(w)) rc = dp_cu_error("barrier on rank %d did not complete", g->base.rank);
  pthread_mutex_unlock(&g->mu);
  if (!rc) rc = dp_cu_take_errors();
  work_release(w);
  return rc;
}

/* ---- groups ---- */
static void free_group(nccl_pg *g) {
  if (g->stream) cudaStreamDestroy(g->stream);
  if (g->ready) cudaEventDestroy(g->ready);
  if (g->barrier_buf) cudaFree(g->barrier_buf);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* The group's streams, events and buffer; the communicator comes after. */
static nccl_pg *alloc_group(int device, int rank, int size, int global_rank, dp_store *store, int timeout_ms,
                            bool debug) {
  nccl_pg *g = calloc(1, sizeof *g);
  if (!g) {
    dp_cu_error("nccl: out of host memory");
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->base.ops = &nccl_ops;
  g->base.rank = rank, g->base.size = size, g->base.global_rank = global_rank;
  g->base.timeout_ms = timeout_ms > 0 ? timeout_ms : 300000;
  g->base.debug = debug;
  g->base.store = store;
  g->device = device;
  int lo = 0, hi = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
  /* communication gets the higher priority: its kernels are short and gate other ranks */
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, hi);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaMalloc((void **)&g->barrier_buf, sizeof(float));
  if (e == cudaSuccess) e = cudaMemset(g->barrier_buf, 0, sizeof(float));
  if (e != cudaSuccess) {
    dp_cu_check(e, "nccl: setting up the communication stream", device);
    free_group(g);
    return NULL;
  }
  return g;
}

static int start_watchdog(nccl_pg *g) {
  if (pthread_create(&g->watchdog, NULL, watchdog_main, g) != 0)
    return dp_cu_error("nccl: could not start the watchdog thread");
  g->watchdog_running = true;
  return 0;
}

static void nccl_destroy(dp_pg *pg) {
  nccl_pg *g = (nccl_pg *)pg;
  dp_cu_select(g->device);
  double deadline = now_s() + g->base.timeout_ms / 1000.0;
  while (cudaStreamQuery(g->stream) == cudaErrorNotReady) { /* let queued collectives finish */
    if (now_s() > deadline) {
      pthread_mutex_lock(&g->mu);
      fail_locked(g, "nccl: collectives were still running when the group was destroyed; the communicator was "
                     "aborted");
      pthread_mutex_unlock(&g->mu);
      break;
    }
    nap();
  }
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  if (g->watchdog_running) pthread_join(g->watchdog, NULL);
  if (g->comm && !g->aborted) {
    pthread_mutex_lock(&g->mu);
    ncclResult_t r = settle_locked(g, g->comm, ncclCommFinalize(g->comm), now_s() + g->base.timeout_ms / 1000.0,
                                   "destroying the communicator");
    if (!g->aborted) {
      if (r == ncclSuccess) ncclCommDestroy(g->comm);
      else ncclCommAbort(g->comm);
    }
    pthread_mutex_unlock(&g->mu);
  }
  free_group(g);
}

static int nccl_new_group(dp_pg *pg, const int *ranks, int n, dp_pg **out) {
  nccl_pg *g = (nccl_pg *)pg;
  *out = NULL;
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= g->base.size || (i > 0 && ranks[i] <= ranks[i - 1]))
      return dp_cu_error("new_group: ranks must be distinct group ranks in ascending order within 0..%d (position "
                         "%d holds %d)",
                         g->base.size - 1, i + 1, ranks[i]);
    if (ranks[i] == g->base.rank) me = i;
  }
  if (!dp_cu_enter(g->device)) return -1;
  nccl_pg *sub = NULL;
  if (me >= 0) {
    sub = alloc_group(g->device, me, n, g->base.global_rank, g->base.store, g->base.timeout_ms, g->base.debug);
    if (!sub) return -1;
    snprintf(sub->base.prefix, sizeof sub->base.prefix, "%.40s/g%llu", g->base.prefix,
             (unsigned long long)g->base.seq);
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  pthread_mutex_lock(&g->mu);
  ncclResult_t r = ncclCommSplit(g->comm, me >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, g->base.rank, &comm, &cfg);
  r = settle_locked(g, comm ? comm : g->comm, r, now_s() + g->base.timeout_ms / 1000.0, "new_group");
  pthread_mutex_unlock(&g->mu);
  g->base.seq++; /* every rank of the parent took part */
  if (r != ncclSuccess) {
    int rc = r == ncclInProgress ? dp_cu_error("%s", g->failed) : nccl_fail(g, r, "new_group (ncclCommSplit)");
    if (comm) ncclCommAbort(comm);
    if (sub) free_group(sub);
    return rc;
  }
  if (!sub) return 0;
  sub->comm = comm;
  if (start_watchdog(sub)) {
    ncclCommAbort(comm);
    free_group(sub);
    return -1;
  }
  *out = &sub->base;
  return 0;
}

static const dp_pg_ops nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .barrier = nccl_barrier,
    .send = nccl_send,
    .recv = nccl_recv,
    .new_group = nccl_new_group,
    .alloc_shared = NULL,
    .destroy = nccl_destroy,
};

dp_pg *dp_cu_pg_nccl_new(const dp_pg_init *in) {
  int ndev = dp_cu_device_count();
  if (in->size < 1 || in->rank < 0 || in->rank >= in->size) {
    dp_cu_error("nccl: rank %d is not within a world of size %d", in->rank, in->size);
    return NULL;
  }
  int device = (in->local_rank >= 0 ? in->local_rank : in->rank) % ndev;
  if (!dp_cu_enter(device)) return NULL;
  int timeout_ms = in->timeout_ms > 0 ? in->timeout_ms : 300000;
  /* one unique id per init_process_group of the job: the n-th init of every
   * rank uses generation n (each rank's add lands before its init ends) */
  int64_t count = 0;
  if (dp_cu_api->store_add(in->store, "nccl/inits", 1, &count)) return NULL;
  long long gen = (long long)((count - 1) / in->size);
  char key[96];
  snprintf(key, sizeof key, "nccl/%lld/unique_id", gen);
  ncclUniqueId id;
  if (in->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      dp_cu_error("nccl: creating the unique id on rank 0 failed: %s", ncclGetErrorString(r));
      return NULL;
    }
    if (dp_cu_api->store_set(in->store, key, &id, sizeof id)) return NULL;
  } else {
    void *val = NULL;
    size_t len = 0;
    if (dp_cu_api->store_get(in->store, key, &val, &len, timeout_ms)) {
      dp_cu_api->error_prefix("nccl: waiting for rank 0's unique id: ");
      return NULL;
    }
    if (len != sizeof id) {
      free(val);
      dp_cu_error("nccl: rank 0's unique id has %zu bytes, expected %zu (mismatched NCCL builds?)", len, sizeof id);
      return NULL;
    }
    memcpy(&id, val, sizeof id);
    free(val);
  }
  nccl_pg *g = alloc_group(device, in->rank, in->size, in->rank, in->store, timeout_ms, in->debug);
  if (!g) return NULL;
  snprintf(g->base.prefix, sizeof g->base.prefix, "nccl/%lld", gen);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  pthread_mutex_lock(&g->mu);
  ncclResult_t r = ncclCommInitRankConfig(&g->comm, in->size, id, in->rank, &cfg);
  r = settle_locked(g, g->comm, r, now_s() + timeout_ms / 1000.0, "creating the communicator");
  pthread_mutex_unlock(&g->mu);
  if (r != ncclSuccess) {
    if (r == ncclInProgress) dp_cu_error("%s", g->failed);
    else nccl_fail(g, r, "creating the communicator");
    if (g->comm && !g->aborted) ncclCommAbort(g->comm);
    free_group(g);
    if (in->local_size > ndev) {
      char msg[900];
      snprintf(msg, sizeof msg, "%s (%d ranks on this node share %d GPU%s: nccl needs one GPU per rank; use "
                                "backend=\"cpu\" to share a GPU)",
               dp_cu_api->errmsg(), in->local_size, ndev, ndev == 1 ? "" : "s");
      dp_cu_error("%s", msg);
    }
    return NULL;
  }
  if (start_watchdog(g)) {
    ncclCommAbort(g->comm);
    free_group(g);
    return NULL;
  }
  return &g->base;
}
