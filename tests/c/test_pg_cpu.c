/* The cpu process group from C: forked ranks run every collective on the
 * shared-memory path (2 and 4 ranks), on the TCP path between simulated
 * nodes (4 ranks as 2 nodes x 2, and 3 ranks as 1 + 2), with tensors in the
 * alloc_shared pool (all ranks, and only some), async handles, sub-groups
 * and point-to-point, against values computed here independently. Each
 * rank's input is a known function of (rank, index). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "distributed/pg.h"
#include "distributed/shm.h"
#include "ops/ops.h"
#include "test_util.h"

static int port;
static const char *token = "pgtest";

/* an op that fails counts and says why */
static int op_failed(int rc, const char *what) {
  if (rc) fprintf(stderr, "%s: %s\n", what, dp_errmsg());
  return rc != 0;
}
#define OP(expr) op_failed((expr), #expr)

static double input(dp_redop op, int r, int64_t i) {
  if (op == DP_RED_PROD) return 1 + (r + i) % 3;
  return (r + 1) * 3 + i % 11 - 5;
}

static double expect(dp_redop op, int R, int64_t i) {
  double acc = input(op, 0, i);
  for (int r = 1; r < R; r++) {
    double x = input(op, r, i);
    if (op == DP_RED_SUM || op == DP_RED_AVG) acc += x;
    if (op == DP_RED_PROD) acc *= x;
    if (op == DP_RED_MAX) acc = x > acc ? x : acc;
    if (op == DP_RED_MIN) acc = x < acc ? x : acc;
  }
  return op == DP_RED_AVG ? acc / R : acc;
}

static dp_tensor *filled(dp_dtype dt, int64_t n, dp_redop op, int r, dp_storage *st) {
  dp_tensor *t = st ? dp_from_storage(st, dt, 1, &n, NULL, 0) : dp_empty(dt, 1, &n, dp_cpu());
  for (int64_t i = 0; i < n; i++) dp_set_d(t, &i, input(op, r, i));
  return t;
}

static int check_all(dp_tensor *t, dp_redop op, int R, const char *what) {
  int bad = 0;
  for (int64_t i = 0; i < dp_numel(t); i++) {
    double v;
    dp_get_d(t, &i, &v);
    double e = expect(op, R, i);
    if (!(v == e || (t->dtype == DP_F32 && v == (double)(float)e))) {
      if (bad++ < 3) fprintf(stderr, "%s: [%lld] = %g, expected %g\n", what, (long long)i, v, e);
    }
  }
  return bad;
}

static void test_all_reduce(dp_pg *g, int *fails) {
  const dp_dtype dts[] = {DP_F32, DP_F64, DP_I64};
  const int64_t sizes[] = {1, 7, 100003};
  for (int d = 0; d < 3; d++)
    for (int op = 0; op < 5; op++)
      for (int s = 0; s < 3; s++) {
        if (dts[d] == DP_I64 && op == DP_RED_AVG) continue;
        dp_tensor *t = filled(dts[d], sizes[s], (dp_redop)op, g->global_rank, NULL);
        if (g->ops->all_reduce(g, t, (dp_redop)op, NULL)) {
          fprintf(stderr, "all_reduce failed: %s\n", dp_errmsg());
          (*fails)++;
        } else {
          char what[64];
          snprintf(what, sizeof what, "all_reduce %s %s n=%lld", dp_redop_name((dp_redop)op), dp_dtype_name(dts[d]),
                   (long long)sizes[s]);
          *fails += check_all(t, (dp_redop)op, g->size, what);
        }
        dp_release(t);
      }
}

/* pool tensors on `which` ranks (all when -1): in-place and mixed paths */
static void test_pool(dp_pg *g, int which, int *fails) {
  int64_t n = 300007;
  dp_storage *st = NULL;
  if (which < 0 || which == g->rank) st = g->ops->alloc_shared(g, (size_t)n * 4);
  dp_tensor *t = filled(DP_F32, n, DP_RED_SUM, g->global_rank, st);
  if (OP(g->ops->all_reduce(g, t, DP_RED_AVG, NULL))) (*fails)++;
  else *fails += check_all(t, DP_RED_AVG, g->size, "pool all_reduce");
  for (int64_t i = 0; i < n; i++) dp_set_d(t, &i, input(DP_RED_SUM, g->global_rank, i));
  dp_tensor *out = dp_empty(DP_F32, 1, (int64_t[]){n * g->size}, dp_cpu());
  if (OP(g->ops->all_gather(g, out, t, NULL))) (*fails)++;
  for (int64_t i = 0; i < n * g->size; i += 997) {
    double v;
    dp_get_d(out, &i, &v);
    if (v != input(DP_RED_SUM, (int)(i / n), i % n)) (*fails)++;
  }
  if (st) dp_storage_release(st);
  dp_release(t);
  dp_release(out);
}

static void test_rooted(dp_pg *g, int *fails) {
  int R = g->size;
  for (int root = 0; root < R; root++) {
    int64_t n = root % 2 ? 300001 : 5;
    dp_tensor *t = dp_empty(DP_U8, 1, &n, dp_cpu());
    for (int64_t i = 0; i < n; i++) dp_set_d(t, &i, g->rank == root ? (double)((i * 7 + root) % 251) : 0);
    if (OP(g->ops->broadcast(g, t, root, NULL))) (*fails)++;
    for (int64_t i = 0; i < n; i++) {
      double v;
      dp_get_d(t, &i, &v);
      if (v != (double)((i * 7 + root) % 251)) {
        (*fails)++;
        break;
      }
    }
    dp_release(t);
    dp_tensor *x = filled(DP_F64, 1001, DP_RED_MAX, g->global_rank, NULL);
    if (OP(g->ops->reduce(g, x, root, DP_RED_MAX, NULL))) (*fails)++;
    if (g->rank == root) *fails += check_all(x, DP_RED_MAX, R, "reduce");
    else {
      int64_t i = 3;
      double v;
      dp_get_d(x, &i, &v);
      if (v != input(DP_RED_MAX, g->global_rank, 3)) (*fails)++; /* non-roots keep their input */
    }
    dp_release(x);
  }
}

static void test_scatter_gather(dp_pg *g, int *fails) {
  int R = g->size;
  int64_t n = 70001, nin = n * R;
  dp_tensor *in = dp_empty(DP_I64, 1, &nin, dp_cpu()), *out = dp_empty(DP_I64, 1, &n, dp_cpu());
  for (int64_t i = 0; i < nin; i++) dp_set_d(in, &i, (double)(i * (g->rank + 1)));
  if (OP(g->ops->reduce_scatter(g, out, in, DP_RED_SUM, NULL))) (*fails)++;
  int64_t tri = (int64_t)R * (R + 1) / 2;
  for (int64_t i = 0; i < n; i++) {
    double v;
    dp_get_d(out, &i, &v);
    if (v != (double)((g->rank * n + i) * tri)) {
      fprintf(stderr, "reduce_scatter [%lld] = %g\n", (long long)i, v);
      (*fails)++;
      break;
    }
  }
  dp_tensor *all = dp_empty(DP_I64, 1, &nin, dp_cpu());
  if (OP(g->ops->all_gather(g, all, out, NULL))) (*fails)++;
  for (int64_t i = 0; i < nin; i++) {
    double v;
    dp_get_d(all, &i, &v);
    if (v != (double)(i * tri)) {
      fprintf(stderr, "all_gather [%lld] = %g\n", (long long)i, v);
      (*fails)++;
      break;
    }
  }
  dp_release(in);
  dp_release(out);
  dp_release(all);
}

static void test_async_p2p(dp_pg *g, int *fails) {
  dp_tensor *ts[3];
  dp_work *ws[3];
  for (int k = 0; k < 3; k++) {
    ts[k] = filled(DP_F32, 50000 + k, DP_RED_SUM, g->global_rank, NULL);
    if (OP(g->ops->all_reduce(g, ts[k], DP_RED_SUM, &ws[k]))) (*fails)++;
  }
  if (OP(g->ops->barrier(g))) (*fails)++; /* a sync op after queued ones */
  for (int k = 0; k < 3; k++) {
    if (dp_work_wait(ws[k])) (*fails)++;
    if (!dp_work_is_completed(ws[k])) (*fails)++;
    *fails += check_all(ts[k], DP_RED_SUM, g->size, "async all_reduce");
    dp_work_release(ws[k]);
    dp_release(ts[k]);
  }
  /* ring: send to the next, receive from the previous (even ranks first) */
  int R = g->size, next = (g->rank + 1) % R, prev = (g->rank + R - 1) % R;
  int64_t n = 200003;
  dp_tensor *s = filled(DP_F64, n, DP_RED_SUM, g->rank, NULL), *r = dp_empty(DP_F64, 1, &n, dp_cpu());
  int rc = g->rank % 2 ? g->ops->recv(g, r, prev) || g->ops->send(g, s, next)
                       : g->ops->send(g, s, next) || g->ops->recv(g, r, prev);
  if (rc) {
    fprintf(stderr, "p2p: %s\n", dp_errmsg());
    (*fails)++;
  }
  for (int64_t i = 0; i < n; i += 101) {
    double v;
    dp_get_d(r, &i, &v);
    if (v != input(DP_RED_SUM, prev, i)) {
      (*fails)++;
      break;
    }
  }
  dp_release(s);
  dp_release(r);
}

static void test_subgroup(dp_pg *g, int *fails) {
  /* odd ranks form a group; everyone calls new_group */
  int ranks[8], n = 0;
  for (int r = 1; r < g->size; r += 2) ranks[n++] = r;
  dp_pg *sub = NULL;
  if (OP(g->ops->new_group(g, ranks, n, &sub))) (*fails)++;
  if ((sub != NULL) != (g->rank % 2 == 1)) (*fails)++;
  if (sub) {
    dp_tensor *t = dp_full(DP_F64, 1, (int64_t[]){9}, g->rank, dp_cpu());
    if (OP(sub->ops->all_reduce(sub, t, DP_RED_SUM, NULL))) (*fails)++;
    double v, e = 0;
    for (int i = 0; i < n; i++) e += ranks[i];
    int64_t i8 = 8;
    dp_get_d(t, &i8, &v);
    if (v != e) (*fails)++;
    dp_release(t);
    sub->ops->destroy(sub);
  }
}

static int rank_main(int rank, int size, const int *nodes, const char *prefix) {
  dp_store *st = dp_store_connect("127.0.0.1", port, token, 10000);
  if (!st) return 2;
  dp_pg_init init = {.store = st,
                     .rank = rank,
                     .size = size,
                     .node_rank = nodes[rank],
                     .timeout_ms = 20000,
                     .job_token = token,
                     .prefix = prefix};
  dp_pg *g = dp_pg_cpu_new(&init);
  if (!g) {
    fprintf(stderr, "rank %d: %s\n", rank, dp_errmsg());
    return 3;
  }
  int fails = 0;
  test_all_reduce(g, &fails);
  test_pool(g, -1, &fails);
  test_pool(g, 0, &fails);
  test_rooted(g, &fails);
  test_scatter_gather(g, &fails);
  test_async_p2p(g, &fails);
  test_subgroup(g, &fails);
  if (OP(g->ops->barrier(g))) fails++;
  /* a shut-down group is a tombstone: calls fail, nothing crashes */
  g->ops->shutdown(g);
  dp_tensor *t = dp_zeros(DP_F32, 1, (int64_t[]){4}, dp_cpu());
  if (g->ops->all_reduce(g, t, DP_RED_SUM, NULL) == 0 || !strstr(dp_errmsg(), "destroyed")) fails++;
  if (g->ops->alloc_shared(g, 64) != NULL) fails++;
  dp_release(t);
  g->ops->destroy(g);
  dp_store_close(st);
  if (fails) fprintf(stderr, "rank %d: %d failures\n", rank, fails);
  return fails ? 1 : 0;
}

/* The store's thread starts after the forks (a child must not inherit a
 * lock held by a thread of the parent). */
static int run(int size, const int *nodes, const char *prefix) {
  pid_t pids[8];
  int lfd = dp_store_listen("127.0.0.1", 0, &port);
  CHECK(lfd >= 0);
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(lfd);
      _exit(rank_main(r, size, nodes, prefix));
    }
  }
  dp_store_server *srv = dp_store_server_start_fd(lfd, token);
  CHECK(srv != NULL);
  int bad = 0;
  for (int r = 0; r < size; r++) {
    int status;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "%s: rank %d failed (status %d)\n", prefix, r, status);
      bad++;
    }
  }
  dp_store_server_stop(srv);
  return bad;
}

static int count_segments(void) {
  DIR *d = opendir("/dev/shm");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, "ddplua-pgtest-", 14) == 0) n++;
  if (d) closedir(d);
  return n;
}

/* The ranks' pools never start a multiple of 256 MiB apart (shm.c's
 * POOL_SKEW): DDP's buckets sit at one offset in every rank's pool, and on
 * the AMD EPYC the two-rank all_reduce's loop over two copies whose
 * addresses agree in their low 28 bits ran 20x slower. */
static void test_pool_layout(void) {
  shm_seg *s = shm_create("ddplua-pgtest-layout", 8, shm_default_sizes());
  CHECK(s != NULL);
  if (!s) return;
  const size_t span = (size_t)256 << 20;
  for (int i = 0; i < 8; i++)
    for (int j = i + 1; j < 8; j++) {
      size_t d = (size_t)(shm_pool_base(s, j) - shm_pool_base(s, i)) % span;
      CHECK(d >= 4096 && d <= span - 4096);
    }
  shm_seg_release(s);
}

/* Freed pool ranges keep their pages for a request of the same size (a
 * DDP reducer made again); any other request gives them back first, and
 * no more than DDPLUA_SHM_KEEP_MB is kept. */
static long long file_kib(shm_seg *s) {
  struct stat st;
  return fstat(s->fd, &st) == 0 ? (long long)st.st_blocks / 2 : -1;
}

static void test_pool_keep(void) {
  setenv("DDPLUA_SHM_KEEP_MB", "3", 1);
  shm_seg *s = shm_create("ddplua-pgtest-keep", 1, shm_default_sizes());
  unsetenv("DDPLUA_SHM_KEEP_MB");
  CHECK(s != NULL);
  if (!s) return;
  long long base = file_kib(s);
  int64_t a = shm_pool_alloc(s, (size_t)2 << 20);
  CHECK(a >= 0);
  CHECK(file_kib(s) - base == 2048);
  memset(shm_pool_base(s, 0) + a, 7, (size_t)2 << 20);
  shm_pool_free(s, a, (size_t)2 << 20);
  CHECK(file_kib(s) - base == 2048); /* kept */
  int64_t again = shm_pool_alloc(s, (size_t)2 << 20);
  CHECK(again == a); /* the same range, its pages still there */
  CHECK(shm_pool_base(s, 0)[a] == 0 && shm_pool_base(s, 0)[a + ((size_t)2 << 20) - 1] == 0); /* zeroed */
  CHECK(file_kib(s) - base == 2048);
  shm_pool_free(s, again, (size_t)2 << 20);
  int64_t other = shm_pool_alloc(s, (size_t)1 << 20); /* another size: the kept range goes back first */
  CHECK(other >= 0);
  CHECK(file_kib(s) - base == 1024);
  int64_t big = shm_pool_alloc(s, (size_t)4 << 20);
  CHECK(big >= 0);
  shm_pool_free(s, big, (size_t)4 << 20); /* past the 3 MiB limit: given back at once */
  CHECK(file_kib(s) - base == 1024);
  shm_pool_free(s, other, (size_t)1 << 20); /* within it: kept */
  CHECK(file_kib(s) - base == 1024);
  /* a miss gives the kept range back into the free list, merged with its
   * neighbours: 5 MiB fit at the pool's start again */
  int64_t five = shm_pool_alloc(s, (size_t)5 << 20);
  CHECK(five == 0);
  CHECK(file_kib(s) - base == 5120);
  shm_pool_free(s, five, (size_t)5 << 20);
  CHECK(file_kib(s) - base == 0); /* past the limit: given back */
  shm_seg_release(s);
}

int main(void) {
  test_pool_layout();
  test_pool_keep();
  const int one_node[4] = {0, 0, 0, 0}, two_nodes[4] = {0, 0, 1, 1}, uneven[3] = {0, 1, 1};
  CHECK(run(2, one_node, "shm2") == 0);
  CHECK(run(4, one_node, "shm4") == 0);
  CHECK(run(4, two_nodes, "tcp4") == 0);
  CHECK(run(3, uneven, "tcp3") == 0);
  CHECK(count_segments() == 0);
  TEST_DONE();
}
