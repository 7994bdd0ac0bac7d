/* Runs one op of the cpu process group on host buffers.
 *
 * On one node an op is a single shared-memory collective. Across nodes it
 * is hierarchical: all_reduce = reduce to the node leader over shared
 * memory, ring all-reduce among leaders over TCP, broadcast from the leader;
 * all_gather = gather within the node into the node's block of the output,
 * ring all-gather of node blocks among leaders, broadcast; broadcast =
 * within the root's node, chain among leaders, within the other nodes.
 * reduce, reduce_scatter and barrier reuse the hierarchical all-reduce (on a
 * scratch copy where the op must not change the input). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "distributed/pg_cpu.h"
#include "distributed/reduce_kern.h"

static int hier_all_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op) {
  cpu_pg *g = c->g;
  int avg_div = op == DP_RED_AVG ? g->base.size : 0;
  if (g->nnodes == 1) {
    if (g->lsize > 1) return shm_all_reduce(c, data, n, dt, op, avg_div);
    if (avg_div) dp_reduce_scale(data, n, dt, avg_div);
    return 0;
  }
  if (g->lsize > 1 && shm_reduce(c, data, n, dt, op, 0, 0)) return -1;
  if (g->lrank == 0) {
    if (tcp_leaders_all_reduce(c, data, n, dt, op)) return -1;
    if (avg_div) dp_reduce_scale(data, n, dt, avg_div);
  }
  return g->lsize > 1 ? shm_broadcast(c, data, n * dp_dtype_size(dt), 0) : 0;
}

/* all_reduce on a copy (reduce on non-roots, reduce_scatter, barrier). */
static int scratch_all_reduce(coll_ctx *c, const void *src, size_t n, dp_dtype dt, dp_redop op, void **out) {
  size_t nb = n * dp_dtype_size(dt);
  void *tmp = dp_xmalloc(nb ? nb : 1);
  if (nb) memcpy(tmp, src, nb);
  c->use_pool = false; /* the published pool offsets describe the input, not this copy */
  if (hier_all_reduce(c, tmp, n, dt, op)) {
    free(tmp);
    return -1;
  }
  *out = tmp;
  return 0;
}

static int exec_broadcast(coll_ctx *c, void *data, size_t nbytes, int root) {
  cpu_pg *g = c->g;
  if (g->nnodes == 1) return g->lsize > 1 ? shm_broadcast(c, data, nbytes, g->lrank_of[root]) : 0;
  int rn = g->node_of[root];
  if (g->my_node == rn && g->lsize > 1 && shm_broadcast(c, data, nbytes, g->lrank_of[root])) return -1;
  if (g->lrank == 0 && tcp_leaders_broadcast(c, data, nbytes, rn)) return -1;
  if (g->my_node != rn && g->lsize > 1) return shm_broadcast(c, data, nbytes, 0);
  return 0;
}

static int exec_all_gather(coll_ctx *c, const void *in, size_t nbytes, uint8_t *out) {
  cpu_pg *g = c->g;
  uint8_t *mine = out + (size_t)g->node_first[g->my_node] * nbytes;
  if (g->lsize > 1) {
    if (shm_all_gather(c, in, nbytes, mine)) return -1;
  } else {
    memmove(mine, in, nbytes);
  }
  if (g->nnodes == 1) return 0;
  if (g->lrank == 0) {
    size_t *off = dp_xmalloc(sizeof(size_t) * 2 * (size_t)g->nnodes), *len = off + g->nnodes;
    for (int k = 0; k < g->nnodes; k++) {
      off[k] = (size_t)g->node_first[k] * nbytes;
      len[k] = (size_t)g->node_size[k] * nbytes;
    }
    int rc = tcp_leaders_all_gather(c, out, off, len);
    free(off);
    if (rc) return -1;
  }
  c->use_pool = false; /* the pool offsets describe the input, not the output */
  return g->lsize > 1 ? shm_broadcast(c, out, (size_t)g->base.size * nbytes, 0) : 0;
}

static int64_t tensor_pool_offset(cpu_pg *g, const dp_tensor *t) {
  int64_t off;
  return t && cpu_pool_offset(g, t, &off) ? off : -1;
}

int cpu_exec(cpu_pg *g, cpu_op *op) {
  if (atomic_load(&g->broken)) return dp_error("%s", g->broken_msg);
  if (g->seg && atomic_load(&g->seg->hdr->aborted)) {
    /* a peer failed while this rank was elsewhere: its step counter may
     * already be ahead, so no wait would notice */
    for (int i = 0; i < 1000 && atomic_load(&g->seg->hdr->aborted) != 1; i++) sched_yield();
    char ctx[256], msg[900];
    cpu_op_ctx(op, ctx, sizeof ctx);
    dp_pg_blame(g->seg->hdr->abort_rank);
    snprintf(msg, sizeof msg, "%s failed on rank %d because rank %d failed: %s", ctx, g->base.global_rank,
             g->seg->hdr->abort_rank, g->seg->hdr->abort_msg);
    cpu_fail(g, msg);
    return dp_error("%s", msg);
  }
  coll_ctx c = {g, op, pg_now_ms() + g->base.timeout_ms, false, true};
  dp_dtype dt = (dp_dtype)op->d.dtype;
  size_t n = (size_t)op->d.count, es = dp_dtype_size(dt);
  dp_redop rop = (dp_redop)op->d.redop;
  uint8_t *data = op->t ? dp_data(op->t) : NULL, *out = op->out ? dp_data(op->out) : NULL;
  bool p2p = op->d.kind == OP_SEND || op->d.kind == OP_RECV;
  if (g->lsize > 1 && !p2p) shm_arrive(&c, tensor_pool_offset(g, op->t));
  int rc = 0;
  void *tmp = NULL;
  switch ((op_kind)op->d.kind) {
  case OP_ALL_REDUCE: rc = hier_all_reduce(&c, data, n, dt, rop); break;
  case OP_BROADCAST: rc = exec_broadcast(&c, data, n * es, op->peer); break;
  case OP_REDUCE: {
    int avg_div = rop == DP_RED_AVG ? g->base.size : 0;
    if (g->nnodes == 1) {
      if (g->lsize > 1) rc = shm_reduce(&c, data, n, dt, rop, g->lrank_of[op->peer], avg_div);
      else if (avg_div) dp_reduce_scale(data, n, dt, avg_div);
    } else {
      rc = scratch_all_reduce(&c, data, n, dt, rop, &tmp);
      if (!rc && g->base.rank == op->peer) memcpy(data, tmp, n * es);
    }
    break;
  }
  case OP_ALL_GATHER: rc = exec_all_gather(&c, data, n * es, out); break;
  case OP_REDUCE_SCATTER: {
    size_t R = (size_t)g->base.size;
    if (g->nnodes == 1 && g->lsize > 1) {
      rc = shm_reduce_scatter(&c, data, out, n, dt, rop, rop == DP_RED_AVG ? (int)R : 0);
    } else if (g->nnodes == 1) {
      memmove(out, data, n * es);
    } else {
      rc = scratch_all_reduce(&c, data, n * R, dt, rop, &tmp);
      if (!rc) memcpy(out, (uint8_t *)tmp + (size_t)g->base.rank * n * es, n * es);
    }
    break;
  }
  case OP_BARRIER:
    if (g->nnodes == 1) {
      rc = g->lsize > 1 ? shm_barrier(&c) : 0;
    } else {
      int64_t one = 1;
      rc = scratch_all_reduce(&c, &one, 1, DP_I64, DP_RED_SUM, &tmp);
    }
    break;
  case OP_SEND:
    if (g->node_of[op->peer] == g->my_node) rc = shm_send(&c, data, n * es, g->lrank_of[op->peer]);
    else rc = tcp_send(&c, data, n * es, op->peer);
    break;
  case OP_RECV:
    if (g->node_of[op->peer] == g->my_node) rc = shm_recv(&c, data, n * es, g->lrank_of[op->peer]);
    else rc = tcp_recv(&c, data, n * es, op->peer);
    break;
  default: rc = dp_error("unknown process group op %d", op->d.kind);
  }
  free(tmp);
  if (rc) cpu_fail(g, dp_errmsg());
  return rc;
}
