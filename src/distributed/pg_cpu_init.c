/* Creating and destroying cpu groups: membership through the store (which
 * rank is on which node), the node's shared segment (created by the local
 * leader as a memfd, opened by the others through /proc), the TCP mesh between nodes,
 * sub-groups, and alloc_shared's pool storage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "distributed/pg_cpu.h"
#include "distributed/reduce_kern.h"

extern const dp_pg_ops dp_pg_cpu_ops;

const char *dp_redop_name(dp_redop op) {
  static const char *const names[] = {"sum", "avg", "max", "min", "prod"};
  return (unsigned)op < 5 ? names[op] : "?";
}

static int store_get_str(dp_store *st, const char *key, char **val, int64_t deadline) {
  size_t len;
  int64_t left = deadline - pg_now_ms();
  return dp_store_get(st, key, (void **)val, &len, left > 0 ? (int)left : 1);
}

/* Node of every group rank: ranks that give the same node_rank (or, with
 * -1, run on the same host) share a node; nodes are numbered in order of
 * their first rank. */
static int exchange_nodes(cpu_pg *g, const cpu_pg_params *p, int *node_of, int64_t deadline) {
  char host[256] = "", key[200], val[400];
  gethostname(host, sizeof host - 1);
  snprintf(key, sizeof key, "%s/member/%d", p->prefix, p->rank);
  if (p->node_rank >= 0) snprintf(val, sizeof val, "n%d", p->node_rank);
  else snprintf(val, sizeof val, "h%s", host);
  if (dp_store_set(p->store, key, val, strlen(val))) return -1;
  char **ids = dp_xcalloc((size_t)p->size, sizeof(char *));
  int rc = 0, nn = 0;
  for (int r = 0; r < p->size && !rc; r++) {
    snprintf(key, sizeof key, "%s/member/%d", p->prefix, r);
    if (store_get_str(p->store, key, &ids[r], deadline)) {
      dp_pg_blame(g->granks[r]);
      rc = dp_error("init_process_group: rank %d of %d never joined within %.1f s", g->granks[r], p->size,
                    p->timeout_ms / 1000.0);
      break;
    }
    int k = 0;
    while (k < r && strcmp(ids[k], ids[r]) != 0) k++;
    node_of[r] = k < r ? node_of[k] : nn++;
  }
  for (int r = 0; r < p->size; r++) free(ids[r]);
  free(ids);
  return rc;
}

static void sanitize(const char *in, char *out, size_t n) {
  size_t k = 0;
  for (; *in && k + 1 < n; in++) out[k++] = (*in == '/' ? '.' : *in);
  out[k] = 0;
}

static unsigned hash_str(const char *s) {
  unsigned h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static int setup_token(cpu_pg *g, const cpu_pg_params *p, int64_t deadline) {
  if (p->token && *p->token) {
    snprintf(g->token, sizeof g->token, "%s", p->token);
    return 0;
  }
  char key[200], *val = NULL;
  snprintf(key, sizeof key, "%s/shm_token", p->prefix);
  if (p->rank == 0) {
    dp_store_make_token(g->token, sizeof g->token);
    return dp_store_set(p->store, key, g->token, strlen(g->token));
  }
  if (store_get_str(p->store, key, &val, deadline)) return -1;
  snprintf(g->token, sizeof g->token, "%s", val);
  free(val);
  return 0;
}

static int setup_segment(cpu_pg *g, const cpu_pg_params *p, int64_t deadline) {
  char key[200], name[256], pre[64], *val = NULL;
  sanitize(p->prefix, pre, sizeof pre);
  snprintf(name, sizeof name, "ddplua-%s-%s-n%d", g->token, pre, g->my_node);
  snprintf(key, sizeof key, "%s/shm/%d", p->prefix, g->my_node);
  if (g->lrank == 0) {
    g->seg = shm_create(name, g->lsize, shm_default_sizes());
    /* the others wait for this key: tell them either way ("ok <pid> <fd>" or why not) */
    char msg[600];
    if (g->seg) snprintf(msg, sizeof msg, "ok %d %d", (int)getpid(), g->seg->fd);
    else snprintf(msg, sizeof msg, "%s", dp_errmsg());
    if (dp_store_set(p->store, key, msg, strlen(msg)) || !g->seg) return -1;
    return shm_wait_mapped(g->seg, deadline);
  }
  if (store_get_str(p->store, key, &val, deadline)) return -1;
  int pid = 0, fd = -1;
  if (sscanf(val, "ok %d %d", &pid, &fd) != 2) {
    dp_pg_blame(g->granks[g->node_first[g->my_node]]);
    dp_error("rank %d could not create the node's shared memory: %s", g->granks[g->node_first[g->my_node]], val);
    free(val);
    return -1;
  }
  free(val);
  g->seg = shm_attach(name, pid, fd, g->lrank, g->lsize);
  return g->seg ? 0 : -1;
}

/* Threads, sockets and the mapping go; the struct stays (see shutdown). */
static void release_resources(cpu_pg *g) {
  cpu_queue_stop(g);
  tcp_mesh_close(g);
  if (g->seg) shm_seg_release(g->seg);
  g->seg = NULL;
}

static void free_group(cpu_pg *g) {
  release_resources(g);
  free(g->granks);
  free(g->node_of);
  free(g->lrank_of);
  free(g->node_first);
  free(g->node_size);
  pthread_mutex_destroy(&g->broken_mu);
  pthread_mutex_destroy(&g->q_mu);
  pthread_cond_destroy(&g->q_cv);
  pthread_cond_destroy(&g->idle_cv);
  free(g);
}

dp_pg *cpu_pg_create(const cpu_pg_params *p) {
  int n = p->size;
  cpu_pg *g = dp_xcalloc(1, sizeof *g);
  g->base.ops = &dp_pg_cpu_ops;
  g->base.rank = p->rank;
  g->base.size = n;
  g->base.global_rank = p->global_rank;
  g->base.timeout_ms = p->timeout_ms;
  g->base.debug = p->debug;
  g->base.store = p->store;
  snprintf(g->base.prefix, sizeof g->base.prefix, "%s", p->prefix);
  g->group_id = (int)(hash_str(p->prefix) & 0x7fffffff);
  pthread_mutex_init(&g->broken_mu, NULL);
  pthread_mutex_init(&g->q_mu, NULL);
  pthread_cond_init(&g->q_cv, NULL);
  pthread_cond_init(&g->idle_cv, NULL);
  g->granks = dp_xmalloc(sizeof(int) * (size_t)n);
  g->node_of = dp_xmalloc(sizeof(int) * (size_t)n);
  g->lrank_of = dp_xmalloc(sizeof(int) * (size_t)n);
  for (int r = 0; r < n; r++) g->granks[r] = p->granks ? p->granks[r] : r;
  int64_t deadline = pg_now_ms() + p->timeout_ms;
  if (p->node_ids) memcpy(g->node_of, p->node_ids, sizeof(int) * (size_t)n);
  else if (exchange_nodes(g, p, g->node_of, deadline)) goto fail;
  /* renumber nodes by first appearance; ranks of a node must be contiguous
   * (as torchrun and the launcher number them) for the node blocks */
  int maxid = 0;
  for (int r = 0; r < n; r++) maxid = g->node_of[r] > maxid ? g->node_of[r] : maxid;
  int *map = dp_xmalloc(sizeof(int) * (size_t)(maxid + 1));
  for (int r = 0; r <= maxid; r++) map[r] = -1;
  g->node_first = dp_xmalloc(sizeof(int) * (size_t)n);
  g->node_size = dp_xcalloc((size_t)n, sizeof(int));
  for (int r = 0; r < n; r++) {
    int id = g->node_of[r];
    if (map[id] < 0) {
      map[id] = g->nnodes;
      g->node_first[g->nnodes++] = r;
    } else if (map[id] != g->nnodes - 1) {
      dp_error("process group: the ranks of a node must be numbered contiguously, but rank %d is on the node of "
               "rank %d with other nodes' ranks in between",
               g->granks[r], g->granks[g->node_first[map[id]]]);
      free(map);
      goto fail;
    }
    g->node_of[r] = map[id];
    g->lrank_of[r] = g->node_size[map[id]]++;
  }
  free(map);
  g->my_node = g->node_of[p->rank];
  g->lrank = g->lrank_of[p->rank];
  g->lsize = g->node_size[g->my_node];
  if (g->lsize > DP_PG_MAX_LOCAL) {
    dp_error("process group: %d ranks on one node; at most %d are supported", g->lsize, DP_PG_MAX_LOCAL);
    goto fail;
  }
  g->spin = shm_default_spin(g->lsize);
  for (int k = 0; k < CPU_STAGE_OPS; k++)
    if (dp_stage_init(&g->stage[k])) goto fail;
  if (setup_token(g, p, deadline)) goto fail;
  if (g->lsize > 1 && setup_segment(g, p, deadline)) goto fail;
  if (tcp_mesh_build(g)) goto fail;
  return &g->base;
fail:
  dp_error_prefix("init_process_group: ");
  free_group(g);
  return NULL;
}

dp_pg *dp_pg_cpu_new(const dp_pg_init *init) {
  if (!init || !init->store) {
    dp_error("dp_pg_cpu_new: a store is required");
    return NULL;
  }
  if (init->size < 1 || init->rank < 0 || init->rank >= init->size) {
    dp_error("init_process_group: rank %d is out of range for world_size %d", init->rank, init->size);
    return NULL;
  }
  cpu_pg_params p = {
      .store = init->store,
      .prefix = init->prefix && *init->prefix ? init->prefix : "pg",
      .rank = init->rank,
      .size = init->size,
      .global_rank = init->rank,
      .node_rank = init->node_rank,
      .timeout_ms = init->timeout_ms > 0 ? init->timeout_ms : 300000,
      .debug = init->debug,
      .token = init->job_token,
  };
  return cpu_pg_create(&p);
}

int cpu_new_group(dp_pg *pg, const int *ranks, int n, dp_pg **out) {
  cpu_pg *g = (cpu_pg *)pg;
  *out = NULL;
  if (atomic_load(&g->broken)) return dp_error("new_group: %s", g->broken_msg);
  if (n < 1) return dp_error("new_group: the list of ranks is empty");
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= pg->size)
      return dp_error("new_group: rank %d is out of range for a group of %d ranks", ranks[i], pg->size);
    if (i && ranks[i] <= ranks[i - 1]) return dp_error("new_group: ranks must be distinct and ascending");
  }
  char prefix[64];
  if (snprintf(prefix, sizeof prefix, "%s/g%d", pg->prefix, ++g->n_children) >= (int)sizeof prefix)
    return dp_error("new_group: groups nested too deeply");
  int me = -1;
  for (int i = 0; i < n; i++)
    if (ranks[i] == pg->rank) me = i;
  if (me < 0) return 0; /* not a member: as PyTorch, every rank calls new_group */
  int *granks = dp_xmalloc(sizeof(int) * (size_t)n * 2), *nodes = granks + n;
  for (int i = 0; i < n; i++) {
    granks[i] = g->granks[ranks[i]];
    nodes[i] = g->node_of[ranks[i]];
  }
  cpu_pg_params p = {
      .store = pg->store,
      .prefix = prefix,
      .rank = me,
      .size = n,
      .global_rank = pg->global_rank,
      .granks = granks,
      .node_ids = nodes,
      .node_rank = -1,
      .timeout_ms = pg->timeout_ms,
      .debug = pg->debug,
      .token = g->token,
  };
  *out = cpu_pg_create(&p);
  free(granks);
  return *out ? 0 : -1;
}

void cpu_destroy(dp_pg *pg) {
  if (pg) free_group((cpu_pg *)pg);
}

void cpu_shutdown(dp_pg *pg) {
  cpu_pg *g = (cpu_pg *)pg;
  pthread_mutex_lock(&g->broken_mu);
  snprintf(g->broken_msg, sizeof g->broken_msg, "the process group was destroyed");
  atomic_store(&g->broken, true); /* every entry point checks this first */
  pthread_mutex_unlock(&g->broken_mu);
  release_resources(g);
}

/* ---- alloc_shared: storage in this rank's pool ---- */

typedef struct {
  shm_seg *seg;
  int64_t off;
  size_t nbytes;
} pool_block;

static void pool_storage_release(dp_storage *st) {
  pool_block *b = st->ctx;
  shm_pool_free(b->seg, b->off, b->nbytes);
  shm_seg_release(b->seg);
  free(b);
}

dp_storage *cpu_alloc_shared(dp_pg *pg, size_t nbytes) {
  cpu_pg *g = (cpu_pg *)pg;
  if (!g->seg || atomic_load(&g->broken)) return NULL; /* alone on the node: plain memory is as good */
  int64_t off = shm_pool_alloc(g->seg, nbytes);
  if (off < 0) return NULL;
  pool_block *b = dp_xmalloc(sizeof *b);
  *b = (pool_block){g->seg, off, nbytes};
  shm_seg_retain(g->seg); /* the mapping outlives the group while storage uses it */
  dp_storage *st = dp_storage_wrap(shm_pool_base(g->seg, g->lrank) + off, nbytes, dp_cpu(), pool_storage_release, b);
  if (!st) pool_storage_release(&(dp_storage){.ctx = b});
  return st;
}

bool cpu_pool_offset(cpu_pg *g, const dp_tensor *t, int64_t *off) {
  const dp_storage *st = t->storage;
  if (!g->seg || st->release != pool_storage_release || ((pool_block *)st->ctx)->seg != g->seg) return false;
  *off = (int64_t)((uint8_t *)dp_data(t) - shm_pool_base(g->seg, g->lrank));
  return true;
}
