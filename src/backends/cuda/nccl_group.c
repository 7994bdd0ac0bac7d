/* The NCCL process group (distributed/pg.h; how it behaves is documented at
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/nccl_group.h"

pthread_mutex_t dp_nccl_life_mu = PTHREAD_MUTEX_INITIALIZER;

double dp_nccl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dp_nccl_nap(void) {
  struct timespec ts = {0, 200000}; /* 0.2 ms */
  nanosleep(&ts, NULL);
}

/* Marks the group failed, aborts the communicator and posts the error for
 * every thread (mu held). */
void dp_nccl_fail_locked(nccl_pg *g, const char *msg) {
  if (!g->failed[0]) snprintf(g->failed, sizeof g->failed, "%s", msg);
  if (!g->aborted && g->comm) {
    ncclCommAbort(g->comm);
    g->aborted = true;
  }
  dp_cu_post_error("%s", g->failed);
}

/* Polls a nonblocking NCCL call to completion (mu held). */
ncclResult_t dp_nccl_settle_locked(nccl_pg *g, ncclComm_t comm, ncclResult_t r, double deadline, const char *what) {
  while (r == ncclInProgress) {
    ncclResult_t st = ncclSuccess;
    r = ncclCommGetAsyncError(comm, &st);
    if (r == ncclSuccess) r = st;
    if (r == ncclInProgress && dp_nccl_now() > deadline) {
      char msg[400];
      snprintf(msg, sizeof msg,
               "nccl: %s on rank %d did not finish within %.1f s (a rank is missing or stuck); the communicator "
               "was aborted",
               what, g->base.rank, g->base.timeout_ms / 1000.0);
      dp_nccl_fail_locked(g, msg);
      return ncclInProgress;
    }
    if (r == ncclInProgress) dp_nccl_nap();
  }
  return r;
}

int dp_nccl_error(nccl_pg *g, ncclResult_t r, const char *what) {
  const char *last = ncclGetLastError(g->comm);
  return dp_cu_error("nccl: %s on rank %d (cuda:%d) failed: %s%s%s%s", what, g->base.rank, g->device,
                     ncclGetErrorString(r), last && *last ? " (" : "", last && *last ? last : "",
                     last && *last ? ")" : "");
}

void dp_nccl_inflight_unref(inflight *f) {
  pthread_mutex_lock(&dp_nccl_life_mu);
  bool last = --f->refs == 0;
  pthread_mutex_unlock(&dp_nccl_life_mu);
  if (!last) return;
  for (int i = 0; i < 2; i++)
    if (f->keep[i]) dp_cu_api->storage_release(f->keep[i]);
  cudaEventDestroy(f->done);
  free(f);
}

static void free_group(nccl_pg *g);

void dp_nccl_group_unref(nccl_pg *g) {
  pthread_mutex_lock(&dp_nccl_life_mu);
  bool last = --g->refs == 0;
  pthread_mutex_unlock(&dp_nccl_life_mu);
  if (last) free_group(g);
}

/* ---- watchdog ---- */
/* Finished collectives are unlinked under the group's lock but released
 * after it is dropped: releasing the last reference to a tensor's storage
 * goes into the caching allocator, and the watchdog must never wait on
 * another lock while it holds the one every collective and work handle of
 * the group takes (it is what aborts a hung communicator). */
static void *watchdog_main(void *arg) {
  nccl_pg *g = arg;
  cudaSetDevice(g->device);
  pthread_mutex_lock(&g->mu);
  for (;;) {
    inflight *reaped = NULL;
    for (inflight **pp = &g->head; *pp;) {
      inflight *f = *pp;
      cudaError_t q = cudaEventQuery(f->done);
      if (q == cudaErrorNotReady && !g->aborted && dp_nccl_now() > f->deadline) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "nccl: %s (collective #%llu of this group) on rank %d did not complete within %.1f s: a rank never "
                 "joined it or is stuck (rerun with DDPLUA_DEBUG=1 to compare collectives across ranks); the "
                 "communicator was aborted",
                 f->desc, (unsigned long long)f->seq, g->base.rank, g->base.timeout_ms / 1000.0);
        dp_nccl_fail_locked(g, msg);
      }
      if (q == cudaErrorNotReady) {
        pp = &f->next;
        continue;
      }
      if (q != cudaSuccess && !g->failed[0]) {
        char msg[400];
        snprintf(msg, sizeof msg, "nccl: %s (collective #%llu) on rank %d failed on the device: %s", f->desc,
                 (unsigned long long)f->seq, g->base.rank, cudaGetErrorString(q));
        dp_nccl_fail_locked(g, msg);
      }
      *pp = f->next;
      f->next = reaped;
      reaped = f;
    }
    if (g->comm && !g->aborted) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(g->comm, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
        char msg[500];
        const char *last = ncclGetLastError(g->comm);
        snprintf(msg, sizeof msg, "nccl: the communicator of rank %d reported an error: %s%s%s; it was aborted",
                 g->base.rank, ncclGetErrorString(st), last && *last ? ": " : "", last && *last ? last : "");
        dp_nccl_fail_locked(g, msg);
      }
    }
    if (reaped) {
      pthread_mutex_unlock(&g->mu);
      while (reaped) {
        inflight *nx = reaped->next;
        dp_nccl_inflight_unref(reaped);
        reaped = nx;
      }
      pthread_mutex_lock(&g->mu);
      continue; /* the list may have changed meanwhile: look again before waiting */
    }
    if ((g->stop && !g->head) || g->exiting) break;
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
  g->refs = 1;
  g->base.ops = &dp_nccl_ops;
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

/* Groups whose watchdog runs. A script that ends without
 * destroy_process_group must not leave watchdogs polling while the CUDA
 * runtime tears itself down: an exit handler (registered after the CUDA
 * runtime's, so it runs first) stops them. */
static nccl_pg *live_groups;

static void stop_watchdogs_at_exit(void) {
  pthread_mutex_lock(&dp_nccl_life_mu);
  nccl_pg *list = live_groups;
  live_groups = NULL;
  pthread_mutex_unlock(&dp_nccl_life_mu);
  for (nccl_pg *g = list; g; g = g->next_live) {
    pthread_mutex_lock(&g->mu);
    g->exiting = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->watchdog, NULL);
    g->watchdog_running = false;
  }
}

static void register_exit_handler(void) { atexit(stop_watchdogs_at_exit); }

static int start_watchdog(nccl_pg *g) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_exit_handler);
  if (pthread_create(&g->watchdog, NULL, watchdog_main, g) != 0)
    return dp_cu_error("nccl: could not start the watchdog thread");
  g->watchdog_running = true;
  pthread_mutex_lock(&dp_nccl_life_mu);
  g->next_live = live_groups;
  live_groups = g;
  pthread_mutex_unlock(&dp_nccl_life_mu);
  return 0;
}

static void forget_group(nccl_pg *g) {
  pthread_mutex_lock(&dp_nccl_life_mu);
  for (nccl_pg **pp = &live_groups; *pp; pp = &(*pp)->next_live)
    if (*pp == g) {
      *pp = g->next_live;
      break;
    }
  pthread_mutex_unlock(&dp_nccl_life_mu);
}

int dp_cu_nccl_sync_streams(int device) {
  int n = 0, cap = 0;
  pthread_mutex_lock(&dp_nccl_life_mu);
  for (nccl_pg *g = live_groups; g; g = g->next_live) cap++;
  nccl_pg **held = cap ? malloc(sizeof *held * (size_t)cap) : NULL;
  for (nccl_pg *g = live_groups; g && held; g = g->next_live)
    if ((device < 0 || g->device == device) && !g->destroyed) {
      g->refs++; /* the group (and its stream) stays until the reference is dropped */
      held[n++] = g;
    }
  pthread_mutex_unlock(&dp_nccl_life_mu);
  if (cap && !held) return dp_cu_error("synchronize: out of host memory");
  int rc = 0;
  for (int i = 0; i < n; i++) {
    nccl_pg *g = held[i];
    /* poll rather than block: a hung collective is the watchdog's to abort,
     * and its error is what this call then raises */
    double deadline = dp_nccl_now() + g->base.timeout_ms / 1000.0 + 1.0;
    cudaError_t q = cudaSuccess;
    while (rc == 0 && g->stream && (q = cudaStreamQuery(g->stream)) == cudaErrorNotReady) {
      pthread_mutex_lock(&g->mu);
      bool failed = g->failed[0] != 0;
      pthread_mutex_unlock(&g->mu);
      if (failed) break;
      if (dp_nccl_now() > deadline)
        rc = dp_cu_error("synchronize: the collectives of the nccl group of rank %d on cuda:%d did not finish within "
                         "%.1f s",
                         g->base.rank, g->device, g->base.timeout_ms / 1000.0);
      else dp_nccl_nap();
    }
    if (rc == 0 && q != cudaSuccess && q != cudaErrorNotReady)
      rc = dp_cu_check(q, "synchronize (nccl communication stream)", g->device);
    if (rc == 0) {
      pthread_mutex_lock(&g->mu);
      if (g->failed[0]) rc = dp_cu_error("synchronize: %s", g->failed);
      pthread_mutex_unlock(&g->mu);
    }
  }
  for (int i = 0; i < n; i++) dp_nccl_group_unref(held[i]);
  free(held);
  return rc ? rc : dp_cu_take_errors();
}

void dp_nccl_destroy(dp_pg *pg) {
  nccl_pg *g = (nccl_pg *)pg;
  dp_cu_select(g->device);
  double deadline = dp_nccl_now() + g->base.timeout_ms / 1000.0;
  while (cudaStreamQuery(g->stream) == cudaErrorNotReady) { /* let queued collectives finish */
    if (dp_nccl_now() > deadline) {
      pthread_mutex_lock(&g->mu);
      dp_nccl_fail_locked(g, "nccl: collectives were still running when the group was destroyed; the communicator was "
                             "aborted");
      pthread_mutex_unlock(&g->mu);
      break;
    }
    dp_nccl_nap();
  }
  forget_group(g);
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  if (g->watchdog_running) pthread_join(g->watchdog, NULL);
  g->watchdog_running = false;
  if (g->comm && !g->aborted) {
    pthread_mutex_lock(&g->mu);
    ncclResult_t r = dp_nccl_settle_locked(g, g->comm, ncclCommFinalize(g->comm),
                                           dp_nccl_now() + g->base.timeout_ms / 1000.0, "destroying the communicator");
    if (!g->aborted) {
      if (r == ncclSuccess) ncclCommDestroy(g->comm);
      else ncclCommAbort(g->comm);
    }
    pthread_mutex_unlock(&g->mu);
  }
  g->comm = NULL;
  if (g->stream) cudaStreamDestroy(g->stream);
  if (g->ready) cudaEventDestroy(g->ready);
  if (g->barrier_buf) cudaFree(g->barrier_buf);
  g->stream = NULL, g->ready = NULL, g->barrier_buf = NULL;
  pthread_mutex_lock(&dp_nccl_life_mu);
  g->destroyed = true;
  pthread_mutex_unlock(&dp_nccl_life_mu);
  dp_nccl_group_unref(g); /* freed now, or by the last work handle */
}

/* The unique id of a new communicator: made by its rank 0, passed to the
 * others through the store under key. */
static int exchange_unique_id(dp_store *store, const char *key, bool root, int timeout_ms, ncclUniqueId *id) {
  if (root) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess)
      return dp_cu_error("nccl: creating the unique id on rank 0 failed: %s", ncclGetErrorString(r));
    return dp_cu_api->store_set(store, key, id, sizeof *id) ? -1 : 0;
  }
  void *val = NULL;
  size_t len = 0;
  if (dp_cu_api->store_get(store, key, &val, &len, timeout_ms)) {
    dp_cu_api->error_prefix("nccl: waiting for rank 0's unique id: ");
    return -1;
  }
  if (len != sizeof *id) {
    free(val);
    return dp_cu_error("nccl: rank 0's unique id has %zu bytes, expected %zu (mismatched NCCL builds?)", len,
                       sizeof *id);
  }
  memcpy(id, val, sizeof *id);
  free(val);
  return 0;
}

int dp_nccl_new_group(dp_pg *pg, const int *ranks, int n, dp_pg **out) {
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
  /* Every rank of the parent calls new_group (as in PyTorch), so every
   * rank's seq names the same group; ranks outside it are done. */
  unsigned long long seq = (unsigned long long)g->base.seq++;
  if (me < 0) return 0;
  /* The sub-group's communicator is a fresh one from a unique id passed
   * through the store, made as the default group's is, not an
   * ncclCommSplit of the parent: a non-blocking split stores the child
   * through the caller's pointer only when its background job ends, after
   * the call returned (seen on the H200 with NCCL 2.28: the group held a
   * NULL communicator, "AllReduce : comm argument is NULL", then NCCL wrote
   * into a dead stack slot and the process crashed), and a blocking one
   * could hang past the deadline while holding the parent's lock that its
   * watchdog needs. */
  nccl_pg *sub = alloc_group(g->device, me, n, g->base.global_rank, g->base.store, g->base.timeout_ms, g->base.debug);
  if (!sub) return -1;
  snprintf(sub->base.prefix, sizeof sub->base.prefix, "%.40s/g%llu", g->base.prefix, seq);
  char key[96];
  snprintf(key, sizeof key, "%s/unique_id", sub->base.prefix);
  ncclUniqueId id;
  if (exchange_unique_id(g->base.store, key, me == 0, g->base.timeout_ms, &id)) {
    free_group(sub);
    return -1;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  pthread_mutex_lock(&sub->mu);
  ncclResult_t r = ncclCommInitRankConfig(&sub->comm, n, id, me, &cfg);
  r = dp_nccl_settle_locked(sub, sub->comm, r, dp_nccl_now() + sub->base.timeout_ms / 1000.0, "new_group");
  pthread_mutex_unlock(&sub->mu);
  if (r != ncclSuccess) {
    int rc = r == ncclInProgress ? dp_cu_error("%s", sub->failed) : dp_nccl_error(sub, r, "new_group");
    if (sub->comm && !sub->aborted) ncclCommAbort(sub->comm);
    sub->comm = NULL;
    free_group(sub);
    return rc;
  }
  if (start_watchdog(sub)) {
    ncclCommAbort(sub->comm);
    sub->comm = NULL;
    free_group(sub);
    return -1;
  }
  *out = &sub->base;
  return 0;
}

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
  if (exchange_unique_id(in->store, key, in->rank == 0, timeout_ms, &id)) return NULL;
  nccl_pg *g = alloc_group(device, in->rank, in->size, in->rank, in->store, timeout_ms, in->debug);
  if (!g) return NULL;
  snprintf(g->base.prefix, sizeof g->base.prefix, "nccl/%lld", gen);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  pthread_mutex_lock(&g->mu);
  ncclResult_t r = ncclCommInitRankConfig(&g->comm, in->size, id, in->rank, &cfg);
  r = dp_nccl_settle_locked(g, g->comm, r, dp_nccl_now() + timeout_ms / 1000.0, "creating the communicator");
  pthread_mutex_unlock(&g->mu);
  if (r != ncclSuccess) {
    if (r == ncclInProgress) dp_cu_error("%s", g->failed);
    else dp_nccl_error(g, r, "creating the communicator");
    if (g->comm && !g->aborted) ncclCommAbort(g->comm);
    free_group(g);
    if (in->local_size > ndev) {
      char msg[900];
      snprintf(msg, sizeof msg,
               "%s (%d ranks on this node share %d GPU%s: nccl needs one GPU per rank; use "
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
