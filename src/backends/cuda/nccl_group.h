/* Internals of the NCCL process group shared by its two files: nccl_group.c
 * (communicators: creation, sub-groups, the watchdog, teardown) and
 * nccl_group_coll.c (collectives and their work handles). The design notes
 * are at the top of nccl_group.c; the behaviour users see is documented at
 * dp_pg_nccl_new in distributed/pg.h. */
#ifndef DP_PG_NCCL_H
#define DP_PG_NCCL_H

#include <nccl.h>

#include "backends/cuda/cuda_host.h"

typedef struct inflight {
  cudaEvent_t done;
  dp_storage *keep[2];
  uint64_t seq;
  char desc[112];
  double deadline;
  int refs; /* the watchdog list, plus a work handle */
  struct inflight *next;
} inflight;

typedef struct nccl_pg {
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
  /* lifetime: the group itself plus every live work handle (a handle may
   * outlive destroy_process_group when Lua collects it later) */
  int refs;
  bool destroyed;
  bool exiting;              /* the process is exiting: the watchdog stops at once */
  struct nccl_pg *next_live; /* groups with a running watchdog (nccl_group.c) */
} nccl_pg;

/* guards inflight and group reference counts (taken after a group's mu; nccl_group.c) */
extern pthread_mutex_t dp_nccl_life_mu;

typedef struct {
  dp_work base;
  nccl_pg *g;
  inflight *f;
} nccl_work;

extern const dp_pg_ops dp_nccl_ops;

/* monotonic seconds; a short sleep between polls */
double dp_nccl_now(void);
void dp_nccl_nap(void);
/* Marks the group failed, aborts its communicator, posts msg (g->mu held). */
void dp_nccl_fail_locked(nccl_pg *g, const char *msg);
/* Polls a nonblocking NCCL call until it leaves ncclInProgress or the
 * deadline passes (then the group fails; returns ncclInProgress). mu held. */
ncclResult_t dp_nccl_settle_locked(nccl_pg *g, ncclComm_t comm, ncclResult_t r, double deadline, const char *what);
/* -1 + an error naming what failed, on which rank, and NCCL's reason */
int dp_nccl_error(nccl_pg *g, ncclResult_t r, const char *what);
void dp_nccl_inflight_unref(inflight *f);
void dp_nccl_group_unref(nccl_pg *g);
int dp_nccl_new_group(dp_pg *pg, const int *ranks, int n, dp_pg **out);
void dp_nccl_destroy(dp_pg *pg);

#endif
