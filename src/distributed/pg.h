/* Process groups: one interface, two backends (pg_cpu.c: shared memory
 * within a node + TCP between nodes; the NCCL backend in the CUDA plugin).
 *
 * Every collective takes contiguous tensors (the Lua layer makes them so and
 * copies back), has a deadline (the group's timeout) and a per-group
 * sequence number; a rank that waits past the deadline fails with an error
 * naming the collective, its sequence number and the ranks that never
 * arrived. With `work` non-NULL the call returns at once with a handle
 * (the collective runs on the backend's communication thread / stream);
 * with `work` NULL it completes before returning. Collectives on one group
 * are executed in the order they were issued, on every rank. */
#ifndef DP_PG_H
#define DP_PG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/store.h"
#include "tensor/tensor.h"

typedef enum { DP_RED_SUM, DP_RED_AVG, DP_RED_MAX, DP_RED_MIN, DP_RED_PROD } dp_redop;

typedef struct dp_pg dp_pg;
typedef struct dp_work dp_work;

typedef struct dp_pg_ops {
  const char *name; /* "cpu", "nccl" */
  int (*all_reduce)(dp_pg *g, dp_tensor *t, dp_redop op, dp_work **work);
  int (*broadcast)(dp_pg *g, dp_tensor *t, int root, dp_work **work);
  /* result valid on root only */
  int (*reduce)(dp_pg *g, dp_tensor *t, int root, dp_redop op, dp_work **work);
  /* out: world * numel(in) elements, rank r's input at [r * numel(in)] */
  int (*all_gather)(dp_pg *g, dp_tensor *out, dp_tensor *in, dp_work **work);
  /* in: world * numel(out) elements; out = reduction of every rank's slice r */
  int (*reduce_scatter)(dp_pg *g, dp_tensor *out, dp_tensor *in, dp_redop op, dp_work **work);
  int (*barrier)(dp_pg *g);
  int (*send)(dp_pg *g, dp_tensor *t, int dst);
  int (*recv)(dp_pg *g, dp_tensor *t, int src);
  /* A subgroup of `ranks` (group ranks of g, ascending). Every rank of g
   * calls this (as PyTorch's new_group); ranks not in the list get *out =
   * NULL. */
  int (*new_group)(dp_pg *g, const int *ranks, int n, dp_pg **out);
  /* Optional: memory that collectives can read from peers in place (the
   * cpu backend's shared segment). NULL entry or NULL result: use plain
   * memory. DDP allocates its gradient buckets here. A collective whose
   * tensor lives there on every rank of a node skips the staging copies;
   * on some ranks only, those ranks skip theirs. (cpu: pages are allocated
   * per call; the storage keeps the mapping alive past the group.) */
  dp_storage *(*alloc_shared)(dp_pg *g, size_t nbytes);
  void (*destroy)(dp_pg *g);
  /* Optional: releases everything destroy does (threads, mappings,
   * sockets) but keeps the struct as a tombstone on which every later call
   * fails with "the process group was destroyed" — for groups that C code
   * (a DDP reducer) may still point at when Lua destroys them. destroy()
   * frees a shut-down group. */
  void (*shutdown)(dp_pg *g);
} dp_pg_ops;

struct dp_pg {
  const dp_pg_ops *ops;
  int rank, size;  /* within this group */
  int global_rank; /* in the default group */
  int timeout_ms;
  uint64_t seq;         /* collectives issued so far */
  bool debug;           /* DDPLUA_DEBUG=1: cross-check op/dtype/count */
  dp_store *store;      /* shared with the default group */
  char prefix[64];      /* store key prefix of this group */
  _Atomic int holds;    /* C holders besides the Lua group (dp_pg_hold) */
  _Atomic bool retired; /* destroy_process_group was called */
};

/* A group's lifetime. The Lua group object owns it; C code that keeps using
 * it past the call that handed it over (a DDP reducer) holds it. Retiring
 * (destroy_process_group) shuts it down at once, so every later call fails
 * with "the process group was destroyed", and frees it when nothing holds
 * it any more: one init/destroy cycle leaves nothing behind. (A backend
 * without shutdown, NCCL's, is destroyed when the last holder lets go.) */
void dp_pg_hold(dp_pg *g);
void dp_pg_unhold(dp_pg *g);
void dp_pg_retire(dp_pg *g);

/* Completion handles. */
struct dp_work {
  int (*wait)(dp_work *w); /* 0, or -1 + dp_error naming the collective */
  bool (*is_completed)(dp_work *w);
  void (*release)(dp_work *w);
};
static inline int dp_work_wait(dp_work *w) { return w->wait(w); }
static inline bool dp_work_is_completed(dp_work *w) { return w->is_completed(w); }
static inline void dp_work_release(dp_work *w) {
  if (w) w->release(w);
}

/* How a group is created: rendezvous through the store. */
typedef struct dp_pg_init {
  dp_store *store;
  int rank, size;
  int local_rank, local_size; /* on this node */
  int node_rank, nnodes;
  int timeout_ms;
  bool debug;
  /* Optional (zero-initialised = defaults): */
  const char *job_token; /* DDPLUA_JOB_TOKEN, names shared-memory segments; NULL: one is made up */
  const char *prefix;    /* store key prefix, distinct per init in one job; NULL: "pg" */
} dp_pg_init;

/* cpu backend (pg_cpu*.c). Ranks with the same node_rank share memory
 * (node_rank -1: ranks on the same host do); the ranks of a node must be
 * numbered contiguously. Collective; NULL + dp_error on failure. */
dp_pg *dp_pg_cpu_new(const dp_pg_init *init);

/* nccl backend (the CUDA plugin, src/backends/cuda/nccl_group.c; reached through
 * src/distributed/pg_nccl_loader.c, which loads the plugin): what
 * dist.init_process_group{backend="nccl"} calls. NULL + dp_error when CUDA
 * or NCCL is unavailable, or when rendezvous / communicator setup fails or
 * passes init->timeout_ms.
 *  - Device: the group's GPU is cuda:(local_rank % visible GPUs); tensors
 *    passed to its collectives must live there (an error names both).
 *  - Ordering: collectives run on a communication stream that first waits
 *    (by event) for the work already queued on the compute stream; with
 *    work == NULL the compute stream then waits for the collective, so
 *    "completes before returning" means "is ordered before every later
 *    op", with no host synchronisation. dp_work_wait does the same for an
 *    async handle and reports errors; barrier() also waits on the host.
 *  - Errors and deadlines: a watchdog thread polls each collective; one
 *    that fails or is not done within timeout_ms aborts the communicator
 *    (ncclCommAbort) and the error, naming the collective and its sequence
 *    number, is raised by the next call on the group or on any CUDA op.
 *  - new_group uses ncclCommSplit (every rank of the parent calls it).
 *  - alloc_shared is NULL: DDP buckets are ordinary device tensors.
 *  - debug: the op, dtype and element count of every collective are
 *    compared across ranks through the store; a mismatch names both sides. */
dp_pg *dp_pg_nccl_new(const dp_pg_init *init);

/* The rank (in the default group) that this process's groups found at
 * fault for a failure: one that aborted the group, died, never arrived at
 * a collective or at init, or closed its connection; -1 when none. The
 * first one recorded wins (what follows is a consequence). A rank whose
 * script fails tells its host whom it blames (src/host/blame.c), so that
 * the host names the rank that failed first, not the one that noticed. */
int dp_pg_culprit(void);
void dp_pg_blame(int global_rank);

/* Names for messages: "all_reduce", "sum" */
const char *dp_redop_name(dp_redop op);

/* DDPLUA_FORCE_COLLECTIVES=1, a test mode: DDP's reducer and SyncBatchNorm
 * issue their collectives in a group of one rank too, where they skip them
 * (the result is the same), so that one GPU exercises the NCCL paths they
 * take at scale, and one CPU the cpu group's. Read at each decision. */
static inline bool dp_pg_force_collectives(void) {
  const char *v = getenv("DDPLUA_FORCE_COLLECTIVES");
  return v && v[0] && strcmp(v, "0") != 0;
}

#endif
