/* Collectives among the ranks of one node, over the group's segment.
 *
 * Everything is built from one primitive, the step: each rank bumps its
 * step counter (a futex word in its control block) and waits until every
 * local rank has reached the same count. Each rank has two staging slots,
 * and one rule makes them safe without further synchronisation: between
 * steps t and t+1 a rank reads slots of parity t (any rank's) and writes
 * only its own slot of parity t+1. That slot was last read between steps
 * t-1 and t, which every rank finished before it reached step t. The rule
 * holds across ops too (an op's first writes are for the step after the
 * previous op's last), so no op needs a closing step.
 *
 * all_reduce pipelines chunks (reduce_impl): copy a chunk in, reduce my
 * slice of every rank's copy of the previous one, copy the reduced slices of
 * the one before out, step. A tensor that lives in the pool of every rank
 * (alloc_shared) skips the slots: each rank reduces its 1/L of the whole
 * tensor straight from the peers' memory and writes the result into every
 * copy, with one step before and one after. Ranks whose data is in the pool
 * never copy in; peers read it in place. What the peers read from the slots
 * is written with plain or streamed stores, whichever the group has measured
 * faster lately (dp_stage_pick). */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_vec.h"
#include "core/error.h"
#include "distributed/pg_cpu.h"
#include "distributed/reduce_kern.h"

static int grank_of_local(const cpu_pg *g, int l) { return g->granks[g->node_first[g->my_node] + l]; }

static int wait_error(coll_ctx *c, int rc, int j) {
  cpu_pg *g = c->g;
  char ctx[256];
  cpu_op_ctx(c->op, ctx, sizeof ctx);
  int me = g->base.global_rank;
  if (rc == SHM_TIMEOUT) {
    char list[256] = "";
    int nmiss = 0;
    size_t k = 0;
    for (int l = 0; l < g->lsize && c->op->seq; l++) {
      if (atomic_load(&shm_ctl(g->seg, l)->arrived) >= c->op->seq) continue;
      k += (size_t)snprintf(list + k, k < sizeof list ? sizeof list - k : 0, "%s%d", nmiss ? ", " : "",
                            grank_of_local(g, l));
      if (!nmiss) dp_pg_blame(grank_of_local(g, l)); /* the one the others wait for */
      nmiss++;
    }
    if (!nmiss) dp_pg_blame(grank_of_local(g, j));
    if (nmiss)
      return dp_error("%s timed out after %.1f s on rank %d: rank%s %s never arrived", ctx, g->base.timeout_ms / 1000.0,
                      me, nmiss > 1 ? "s" : "", list);
    return dp_error("%s timed out after %.1f s on rank %d waiting for rank %d", ctx, g->base.timeout_ms / 1000.0, me,
                    grank_of_local(g, j));
  }
  if (rc == SHM_DEAD) {
    dp_pg_blame(grank_of_local(g, j));
    return dp_error("%s failed on rank %d: rank %d (pid %d) exited", ctx, me, grank_of_local(g, j),
                    (int)atomic_load(&shm_ctl(g->seg, j)->pid));
  }
  /* aborted by a peer: its message says what happened */
  shm_header *h = g->seg->hdr;
  for (int i = 0; i < 1000 && atomic_load(&h->aborted) != 1; i++) sched_yield();
  dp_pg_blame(h->abort_rank);
  return dp_error("%s failed on rank %d because rank %d failed: %s", ctx, me, h->abort_rank, h->abort_msg);
}

static uint32_t my_step(coll_ctx *c) {
  return atomic_load_explicit(&shm_ctl(c->g->seg, c->g->lrank)->step, memory_order_relaxed);
}

void shm_arrive(coll_ctx *c, int64_t pool_off) {
  shm_rank_ctl *me = shm_ctl(c->g->seg, c->g->lrank);
  me->desc[c->op->seq & 1] = c->op->d;
  me->pool_off[c->op->seq & 1] = pool_off;
  atomic_store(&me->arrived, c->op->seq);
}

static bool desc_eq(const coll_desc *a, const coll_desc *b) {
  return a->kind == b->kind && a->redop == b->redop && a->dtype == b->dtype && a->root == b->root &&
         a->count == b->count;
}

int shm_check_descs(coll_ctx *c) {
  cpu_pg *g = c->g;
  int par = (int)(c->op->seq & 1);
  const coll_desc *d0 = &shm_ctl(g->seg, 0)->desc[par];
  for (int l = 1; l < g->lsize; l++) {
    const coll_desc *d = &shm_ctl(g->seg, l)->desc[par];
    if (desc_eq(d0, d)) continue;
    char a[160], b[160];
    coll_desc_str(d0, a, sizeof a);
    coll_desc_str(d, b, sizeof b);
    return dp_error("collective mismatch: rank %d called %s but rank %d called %s", grank_of_local(g, 0), a,
                    grank_of_local(g, l), b);
  }
  return 0;
}

/* The first step of an op also compares what every local rank called. */
int shm_step(coll_ctx *c) {
  cpu_pg *g = c->g;
  shm_seg *s = g->seg;
  shm_rank_ctl *me = shm_ctl(s, g->lrank);
  uint32_t target = my_step(c) + 1;
  shm_post(&me->step, &me->step_waiters, target);
  for (int j = 0; j < g->lsize; j++) {
    if (j == g->lrank) continue;
    shm_rank_ctl *p = shm_ctl(s, j);
    shm_wait w = {s, c->deadline_ms, g->spin, atomic_load(&p->pid)};
    int rc = shm_wait_ge(&p->step, &p->step_waiters, target, &w);
    if (rc) return wait_error(c, rc, j);
  }
  if (!c->checked) {
    c->checked = true;
    return shm_check_descs(c);
  }
  return 0;
}

int shm_barrier(coll_ctx *c) { return shm_step(c); }

/* Where rank l's data can be read in place (its pool), or NULL. */
static uint8_t *pool_data(coll_ctx *c, int l) {
  if (!c->use_pool) return NULL;
  int64_t off = shm_ctl(c->g->seg, l)->pool_off[c->op->seq & 1];
  return off < 0 ? NULL : shm_pool_base(c->g->seg, l) + off;
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* Elements per slice so slices start on cache lines. */
static size_t slice_len(size_t len, int parts, size_t es) {
  size_t line = 64 / es;
  return ceil_div(ceil_div(len, (size_t)parts), line) * line;
}

/* Every rank's data is in its pool: reduce my 1/L of the whole tensor from
 * the peers' memory, write the result into every copy (root < 0) or into
 * root's only. */
static int reduce_in_place(coll_ctx *c, size_t n, dp_dtype dt, dp_redop op, int root, int avg_div) {
  cpu_pg *g = c->g;
  int L = g->lsize;
  size_t es = dp_dtype_size(dt), q = slice_len(n, L, es);
  size_t lo = (size_t)g->lrank * q, hi = lo + q < n ? lo + q : n;
  uint8_t *tmp = shm_slot(g->seg, g->lrank, 0); /* every rank is past the previous op: any slot is free */
  size_t block = (g->seg->hdr->slot_bytes < ((size_t)128 << 10) ? g->seg->hdr->slot_bytes : (size_t)128 << 10) / es;
  const void *src[DP_PG_MAX_LOCAL];
  /* two ranks (the common single-node DDP case): one fused pass, no staging */
  if (L == 2 && root < 0 &&
      dp_reduce_pair_inplace(pool_data(c, 0) + lo * es, pool_data(c, 1) + lo * es, hi - lo, dt, op, avg_div))
    return shm_step(c);
  for (size_t b = lo; b < hi; b += block) {
    size_t m = hi - b < block ? hi - b : block;
    for (int l = 0; l < L; l++) src[l] = pool_data(c, l) + b * es;
    dp_reduce_n(tmp, src, L, m, dt, op);
    if (avg_div) dp_reduce_scale(tmp, m, dt, avg_div);
    for (int l = 0; l < L; l++)
      if (root < 0 || l == root) memcpy(pool_data(c, l) + b * es, tmp, m * es);
  }
  return shm_step(c);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void copy_staged(void *dst, const void *src, size_t nbytes, dp_stage_kind kind) {
  if (kind == DP_STAGE_STREAMED) dp_cpu_copy_streamed(dst, src, nbytes);
  else memcpy(dst, src, nbytes);
}

/* all_reduce (root < 0) or reduce to local rank root; avg_div > 0 divides
 * the sums by it.
 *
 * A software pipeline with one step per chunk: between two steps a rank
 * copies the peers' slices of chunk i in, reduces its own slice of chunk i-1
 * (its own part straight from its tensor, into which the result goes at
 * once) and copies the peers' reduced slices of chunk i-2 out. What it
 * writes goes to the half of its staging area of the coming step's parity
 * (input chunk, then its reduced slice); what it reads is in the other half,
 * written before the previous step. Chunks are an eighth of the tensor,
 * 256 to 512 KiB: small enough to stay in cache between the copy in, the
 * reduction and the copy out, large enough to keep the steps few. */
#define MIN_CHUNK ((size_t)256 << 10)
#define MAX_CHUNK ((size_t)512 << 10) /* chunk and slice stay in L2 */

static int reduce_impl(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op, int root, int avg_div) {
  cpu_pg *g = c->g;
  shm_seg *s = g->seg;
  int L = g->lsize, me = g->lrank;
  if (L > DP_PG_MAX_LOCAL) return dp_error("more than %d ranks on one node", DP_PG_MAX_LOCAL);
  if (n == 0) return shm_step(c);
  size_t es = dp_dtype_size(dt), unit = (size_t)L * 64, half = s->hdr->slot_bytes;
  size_t max_cb = half * (size_t)L / ((size_t)L + 1) / unit * unit; /* chunk + one slice fit a half */
  size_t cb = (n * es / 8 + unit - 1) / unit * unit;
  if (cb < MIN_CHUNK) cb = (MIN_CHUNK + unit - 1) / unit * unit;
  if (cb > MAX_CHUNK) cb = MAX_CHUNK / unit * unit;
  if (cb > max_cb) cb = max_cb;
  size_t chunk = cb / es, slice_off = cb; /* reduced slice after the input chunk */
  size_t nchunks = (n + chunk - 1) / chunk;
  bool mine_in_pool = pool_data(c, me) != NULL;
  uint8_t *d = data;
  const void *src[DP_PG_MAX_LOCAL];
  dp_stage_kind kind = dp_stage_pick(&g->stage[CPU_STAGE_REDUCE], n * es);
  double t0 = now_s();
  for (size_t i = 0; i <= nchunks + 1; i++) {
    uint32_t T = my_step(c) + 1;        /* the step this iteration's writes are for */
    if (i < nchunks && !mine_in_pool) { /* the peers' slices of chunk i (mine I read from my tensor) */
      size_t off = i * chunk, len = n - off < chunk ? n - off : chunk, q = slice_len(len, L, es);
      size_t lo = (size_t)me * q < len ? (size_t)me * q : len, hi = lo + q < len ? lo + q : len;
      uint8_t *slot = shm_slot(s, me, T), *x = d + off * es;
      copy_staged(slot, x, lo * es, kind);
      copy_staged(slot + hi * es, x + hi * es, (len - hi) * es, kind);
    }
    if (i >= 1 && i - 1 < nchunks) { /* reduce my slice of chunk i-1 */
      size_t off = (i - 1) * chunk, len = n - off < chunk ? n - off : chunk;
      size_t q = slice_len(len, L, es), lo = (size_t)me * q < len ? (size_t)me * q : len;
      size_t hi = lo + q < len ? lo + q : len;
      uint8_t *dst = shm_slot(s, me, T) + slice_off + lo * es;
      /* two ranks, neither in the pool: one pass writes my tensor and the slot */
      uint8_t *peer = L == 2 && (root < 0 || root == me) && !pool_data(c, 1 - me) ? shm_slot(s, 1 - me, T - 1) : NULL;
      bool paired = hi > lo && peer &&
                    dp_reduce_pair_to(d + (off + lo) * es, dst, peer + lo * es, hi - lo, dt, op, avg_div, kind);
      if (hi > lo && !paired) {
        for (int l = 0; l < L; l++) {
          uint8_t *p = l == me ? d : pool_data(c, l);
          src[l] = p ? p + (off + lo) * es : shm_slot(s, l, T - 1) + lo * es;
        }
        dp_reduce_n(dst, src, L, hi - lo, dt, op);
        if (avg_div) dp_reduce_scale(dst, hi - lo, dt, avg_div);
        /* my slice of the result while it is hot (nobody else reads my slice of my tensor) */
        if (root < 0 || root == me) memcpy(d + (off + lo) * es, dst, (hi - lo) * es);
      }
    }
    if (i >= 2 && (root < 0 || root == me)) { /* copy out chunk i-2 */
      size_t off = (i - 2) * chunk, len = n - off < chunk ? n - off : chunk, q = slice_len(len, L, es);
      for (int l = 0; l < L; l++) {
        size_t lo = (size_t)l * q < len ? (size_t)l * q : len, hi = lo + q < len ? lo + q : len;
        if (hi > lo && l != me)
          memcpy(d + (off + lo) * es, shm_slot(s, l, T - 1) + slice_off + lo * es, (hi - lo) * es);
      }
    }
    if (i > nchunks) break;
    if (shm_step(c)) return -1;
    if (i == 0) {
      bool all = true;
      for (int l = 0; l < L; l++) all = all && pool_data(c, l);
      if (all) return reduce_in_place(c, n, dt, op, root, avg_div);
    }
  }
  dp_stage_learn(&g->stage[CPU_STAGE_REDUCE], n * es, kind, now_s() - t0);
  return 0;
}

int shm_all_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op, int avg_div) {
  return reduce_impl(c, data, n, dt, op, -1, avg_div);
}

int shm_reduce(coll_ctx *c, void *data, size_t n, dp_dtype dt, dp_redop op, int root, int avg_div) {
  return reduce_impl(c, data, n, dt, op, root, avg_div);
}

int shm_broadcast(coll_ctx *c, void *data, size_t nbytes, int root) {
  cpu_pg *g = c->g;
  shm_seg *s = g->seg;
  int me = g->lrank;
  size_t chunk = s->hdr->slot_bytes;
  uint8_t *d = data;
  bool root_in_pool = me == root ? pool_data(c, me) != NULL : false;
  if (nbytes == 0) return shm_step(c);
  dp_stage_kind kind = dp_stage_pick(&g->stage[CPU_STAGE_BROADCAST], nbytes);
  double t0 = now_s();
  for (size_t off = 0; off < nbytes; off += chunk) {
    size_t len = nbytes - off < chunk ? nbytes - off : chunk;
    uint32_t t = my_step(c) + 1;
    if (me == root && !root_in_pool) copy_staged(shm_slot(s, me, t), d + off, len, kind);
    if (shm_step(c)) return -1;
    uint8_t *rp = pool_data(c, root);
    if (rp) {
      /* read the root's memory directly, then let it go */
      if (me != root) memcpy(d, rp, nbytes);
      return shm_step(c);
    }
    if (me != root) memcpy(d + off, shm_slot(s, root, t), len);
  }
  dp_stage_learn(&g->stage[CPU_STAGE_BROADCAST], nbytes, kind, now_s() - t0);
  return 0;
}

int shm_all_gather(coll_ctx *c, const void *in, size_t nbytes, void *out) {
  cpu_pg *g = c->g;
  shm_seg *s = g->seg;
  int L = g->lsize, me = g->lrank;
  size_t chunk = s->hdr->slot_bytes;
  const uint8_t *x = in;
  uint8_t *y = out;
  bool mine_in_pool = pool_data(c, me) != NULL, any_pool = false;
  if (nbytes == 0) return shm_step(c);
  dp_stage_kind kind = dp_stage_pick(&g->stage[CPU_STAGE_GATHER], nbytes);
  double t0 = now_s();
  for (size_t off = 0; off < nbytes; off += chunk) {
    size_t len = nbytes - off < chunk ? nbytes - off : chunk;
    uint32_t t = my_step(c) + 1;
    if (!mine_in_pool) copy_staged(shm_slot(s, me, t), x + off, len, kind);
    if (shm_step(c)) return -1;
    for (int l = 0; l < L; l++) {
      uint8_t *p = pool_data(c, l);
      any_pool = any_pool || p;
      uint8_t *dst = y + (size_t)l * nbytes + off, *from = p ? p + off : shm_slot(s, l, t);
      if (dst != from) memmove(dst, from, len); /* (the input may be a view of the output) */
    }
  }
  dp_stage_learn(&g->stage[CPU_STAGE_GATHER], nbytes, kind, now_s() - t0);
  /* inputs read in place must not change before every reader is done */
  return any_pool ? shm_step(c) : 0;
}

int shm_reduce_scatter(coll_ctx *c, const void *in, void *out, size_t n, dp_dtype dt, dp_redop op, int avg_div) {
  cpu_pg *g = c->g;
  shm_seg *s = g->seg;
  int L = g->lsize, me = g->lrank;
  if (L > DP_PG_MAX_LOCAL) return dp_error("more than %d ranks on one node", DP_PG_MAX_LOCAL);
  size_t es = dp_dtype_size(dt);
  size_t q = s->hdr->slot_bytes / ((size_t)L * 64) * 64 / es; /* elements of each block per step */
  const uint8_t *x = in;
  uint8_t *y = out;
  bool mine_in_pool = pool_data(c, me) != NULL, any_pool = false;
  const void *src[DP_PG_MAX_LOCAL];
  if (n == 0) return shm_step(c);
  dp_stage_kind kind = dp_stage_pick(&g->stage[CPU_STAGE_SCATTER], n * es);
  double t0 = now_s();
  for (size_t off = 0; off < n; off += q) {
    size_t len = n - off < q ? n - off : q;
    uint32_t t = my_step(c) + 1;
    if (!mine_in_pool)
      for (int b = 0; b < L; b++)
        copy_staged(shm_slot(s, me, t) + (size_t)b * q * es, x + ((size_t)b * n + off) * es, len * es, kind);
    if (shm_step(c)) return -1;
    for (int l = 0; l < L; l++) {
      uint8_t *p = pool_data(c, l);
      any_pool = any_pool || p;
      src[l] = p ? p + ((size_t)me * n + off) * es : shm_slot(s, l, t) + (size_t)me * q * es;
    }
    dp_reduce_n(y + off * es, src, L, len, dt, op);
    if (avg_div) dp_reduce_scale(y + off * es, len, dt, avg_div);
  }
  dp_stage_learn(&g->stage[CPU_STAGE_SCATTER], n * es, kind, now_s() - t0);
  return any_pool ? shm_step(c) : 0;
}

/* ---- point to point: one channel per ordered pair, two buffers ---- */

static int chan_wait(coll_ctx *c, _Atomic uint32_t *w, _Atomic uint32_t *waiters, uint32_t target, int peer) {
  shm_wait wt = {c->g->seg, c->deadline_ms, c->g->spin, atomic_load(&shm_ctl(c->g->seg, peer)->pid)};
  int rc = shm_wait_ge(w, waiters, target, &wt);
  return rc ? wait_error(c, rc, peer) : 0;
}

int shm_send(coll_ctx *c, const void *data, size_t nbytes, int dst) {
  shm_seg *s = c->g->seg;
  shm_chan_ctl *ch = shm_chan(s, c->g->lrank, dst);
  size_t payload = s->hdr->chan_bytes - sizeof(shm_chan_hdr);
  size_t nchunks = nbytes ? ceil_div(nbytes, payload) : 1;
  for (size_t k = 0; k < nchunks; k++) {
    uint32_t sent = atomic_load_explicit(&ch->sent, memory_order_relaxed);
    /* the buffer of this parity was last used by chunk sent-2 */
    if (chan_wait(c, &ch->acked, &ch->acked_waiters, sent - 1, dst)) return -1;
    uint8_t *buf = shm_chan_buf(s, c->g->lrank, dst, sent);
    if (!buf) return dp_error("send: no space left in /dev/shm for the channel to rank %d", grank_of_local(c->g, dst));
    shm_chan_hdr *h = (shm_chan_hdr *)buf;
    h->nbytes = nbytes;
    h->count = c->op->d.count;
    h->dtype = c->op->d.dtype;
    size_t off = k * payload, len = nbytes - off < payload ? nbytes - off : payload;
    if (nbytes) memcpy(buf + sizeof *h, (const uint8_t *)data + off, len);
    shm_post(&ch->sent, &ch->sent_waiters, sent + 1);
  }
  return 0;
}

int shm_recv(coll_ctx *c, void *data, size_t nbytes, int src) {
  shm_seg *s = c->g->seg;
  shm_chan_ctl *ch = shm_chan(s, src, c->g->lrank);
  size_t payload = s->hdr->chan_bytes - sizeof(shm_chan_hdr);
  size_t nchunks = nbytes ? ceil_div(nbytes, payload) : 1;
  for (size_t k = 0; k < nchunks; k++) {
    uint32_t acked = atomic_load_explicit(&ch->acked, memory_order_relaxed);
    if (chan_wait(c, &ch->sent, &ch->sent_waiters, acked + 1, src)) return -1;
    uint8_t *buf = shm_chan_buf(s, src, c->g->lrank, acked);
    shm_chan_hdr *h = (shm_chan_hdr *)buf;
    if (k == 0 && (h->nbytes != nbytes || h->dtype != c->op->d.dtype)) {
      char ctx[256];
      cpu_op_ctx(c->op, ctx, sizeof ctx);
      return dp_error("%s: rank %d sent %lld %s elements but rank %d expected %lld %s elements", ctx,
                      grank_of_local(c->g, src), (long long)h->count, dp_dtype_name((dp_dtype)h->dtype),
                      c->g->base.global_rank, (long long)c->op->d.count, dp_dtype_name((dp_dtype)c->op->d.dtype));
    }
    size_t off = k * payload, len = nbytes - off < payload ? nbytes - off : payload;
    if (nbytes) memcpy((uint8_t *)data + off, buf + sizeof *h, len);
    shm_post(&ch->acked, &ch->acked_waiters, acked + 1);
  }
  return 0;
}
