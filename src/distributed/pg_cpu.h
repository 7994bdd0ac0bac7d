/* Internals of the cpu process group (pg_cpu*.c, shm*.c, tcp_coll.c).
 *
 * A group spans one or more nodes. Within a node its ranks share one
 * memory segment (shm.h): per-rank control blocks with a step counter that
 * doubles as a futex word, two staging slots per rank, point-to-point
 * channels and a per-rank pool for alloc_shared. Between nodes the ranks
 * hold a TCP mesh; collectives are hierarchical: intra-node reduce over
 * shared memory, a ring among the node leaders (local rank 0), intra-node
 * broadcast.
 *
 * Every operation is described by a cpu_op; the entry points (pg_cpu.c)
 * check arguments, stage CUDA tensors through host memory and either run the
 * op inline or queue it on the group's communication thread. Ops of a group
 * run in issue order on every rank. */
#ifndef DP_PG_CPU_H
#define DP_PG_CPU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distributed/pg.h"
#include "distributed/reduce_kern.h"
#include "distributed/shm.h"

typedef enum {
  OP_ALL_REDUCE,
  OP_BROADCAST,
  OP_REDUCE,
  OP_ALL_GATHER,
  OP_REDUCE_SCATTER,
  OP_BARRIER,
  OP_SEND,
  OP_RECV,
  OP_NKINDS
} op_kind;

const char *op_kind_name(op_kind k);

/* "all_reduce(sum, float32, 1000)" */
void coll_desc_str(const coll_desc *d, char *buf, size_t n);

typedef struct cpu_op {
  coll_desc d;
  uint64_t seq;               /* per-group sequence number of collectives (p2p: 0) */
  int peer;                   /* group rank: root of broadcast/reduce, peer of send/recv */
  dp_tensor *t;               /* host, contiguous: the data / input */
  dp_tensor *out;             /* host, contiguous: all_gather / reduce_scatter output */
  dp_tensor *dev_t, *dev_out; /* device originals staged into t / out (copied back), or NULL */
} cpu_op;

typedef struct cpu_work cpu_work;

/* the collectives that stage data in the slots, each learning its own kind of stores */
enum { CPU_STAGE_REDUCE, CPU_STAGE_BROADCAST, CPU_STAGE_GATHER, CPU_STAGE_SCATTER, CPU_STAGE_OPS };

typedef struct cpu_pg {
  dp_pg base;
  /* membership (indexed by group rank) */
  int *granks;   /* global rank of each group rank */
  int *node_of;  /* node index within the group */
  int *lrank_of; /* index within its node */
  int nnodes, my_node;
  int *node_first; /* first group rank of each node (ranks of a node are contiguous) */
  int *node_size;
  int lrank, lsize; /* on this node */
  int group_id;     /* hash of the prefix: tells the mesh's connections apart */
  int n_children;   /* new_group calls so far (names sub-groups) */
  char token[80];
  /* shared memory (lsize > 1) */
  shm_seg *seg;
  int spin;
  /* plain or streamed stores for what peers read from the slots (reduce_kern.h), learnt per collective */
  dp_stage_stats stage[CPU_STAGE_OPS];
  /* TCP mesh (nnodes > 1): fd per group rank on other nodes, -1 elsewhere */
  int *fds;
  /* the first error leaves the group unusable: every later op reports it */
  atomic_bool broken;
  char broken_msg[512];
  pthread_mutex_t broken_mu;
  /* communication thread (started by the first async op) */
  pthread_t thread;
  bool thread_started, stopping;
  pthread_mutex_t q_mu;
  pthread_cond_t q_cv, idle_cv;
  cpu_work *q_head, *q_tail;
  bool busy;
  uint64_t dbg_seq; /* debug exchange counter */
} cpu_pg;

/* ---- pg_cpu_exec.c: runs one op on host buffers (any thread) ---- */
int cpu_exec(cpu_pg *g, cpu_op *op);

/* ---- pg_cpu.c ---- */
/* Records err as the group's fatal error (first one wins), tells local peers
 * (shared abort flag) and remote ones (sockets shut down). */
void cpu_fail(cpu_pg *g, const char *err);
/* Formats the context of op: "all_reduce #12 (sum, float32, 1000 elements)" */
void cpu_op_ctx(const cpu_op *op, char *buf, size_t n);

/* ---- pg_cpu_queue.c: the communication thread and work handles ---- */
int cpu_submit(cpu_pg *g, cpu_op *op, dp_work **work);
void cpu_queue_stop(cpu_pg *g);
/* Finishes an op: copies staged data back to the device originals, marks
 * the tensors written and releases the references. */
int cpu_op_finish(cpu_op *op, int rc);

/* ---- pg_cpu_init.c ---- */
typedef struct {
  dp_store *store;
  const char *prefix; /* store keys and segment names */
  int rank, size, global_rank;
  const int *granks;   /* global rank of each group rank; NULL: the identity */
  const int *node_ids; /* node of each group rank; NULL: exchanged through the store */
  int node_rank;       /* with node_ids NULL: this rank's node, -1 to group by host name */
  int timeout_ms;
  bool debug;
  const char *token; /* job token for segment names; NULL: rank 0 makes one and shares it */
} cpu_pg_params;
dp_pg *cpu_pg_create(const cpu_pg_params *p);
/* Whether t lives in this rank's pool of g (alloc_shared); *off = its byte
 * offset in the pool. */
bool cpu_pool_offset(cpu_pg *g, const dp_tensor *t, int64_t *off);

/* ---- shm_coll.c: collectives among the ranks of this node ---- */
#define DP_PG_MAX_LOCAL 256 /* ranks of a group on one node */

typedef struct {
  cpu_pg *g;
  const cpu_op *op;
  int64_t deadline_ms;
  bool checked;  /* descriptors compared (at the op's first step) */
  bool use_pool; /* the published pool offsets describe this phase's buffer */
} coll_ctx;

/* One synchronisation step: bump my step counter, wait for every local
 * rank to reach it. The first step of an op also checks descriptors. */
int shm_step(coll_ctx *c);
/* Marks arrival and publishes the descriptor (and pool offset, -1 if none). */
void shm_arrive(coll_ctx *c, int64_t pool_off);
int shm_check_descs(coll_ctx *c);
/* avg_div > 0: the sums are divided by it (avg). */
int shm_all_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op, int avg_div);
/* Result on local rank root only (into data); other ranks' data unchanged. */
int shm_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op, int root, int avg_div);
int shm_broadcast(coll_ctx *c, void *data, size_t nbytes, int root);
/* out[l * nbytes ..] = in of local rank l */
int shm_all_gather(coll_ctx *c, const void *in, size_t nbytes, void *out);
int shm_reduce_scatter(coll_ctx *c, const void *in, void *out, size_t n, dp_dtype dt, dp_redop op, int avg_div);
int shm_barrier(coll_ctx *c);
int shm_send(coll_ctx *c, const void *data, size_t nbytes, int dst_local);
int shm_recv(coll_ctx *c, void *data, size_t nbytes, int src_local);

/* ---- tcp_coll.c: among node leaders / between ranks on different nodes ---- */
/* Builds the mesh: every rank listens, publishes its address in the store,
 * connects to lower ranks on other nodes and accepts the higher ones. */
int tcp_mesh_build(cpu_pg *g);
void tcp_mesh_close(cpu_pg *g);
void tcp_mesh_shutdown(cpu_pg *g);
/* Ring all-reduce among the leaders (node order), in place. */
int tcp_leaders_all_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op);
/* Ring all-gather among the leaders: block of node k at out + off[k], len[k] bytes. */
int tcp_leaders_all_gather(coll_ctx *c, void *out, const size_t *off, const size_t *len);
/* Chain broadcast among leaders starting at node root_node. */
int tcp_leaders_broadcast(coll_ctx *c, void *data, size_t nbytes, int root_node);
int tcp_send(coll_ctx *c, const void *data, size_t nbytes, int dst);
int tcp_recv(coll_ctx *c, void *data, size_t nbytes, int src);

int64_t pg_now_ms(void);

#endif
