/* The NCCL process group at world size 1 (one GPU is enough): rendezvous
 * through a real store, every collective with the results a one-rank world
 * must give, async handles, synchronize waiting for the communication stream,
 * barrier, sub-groups, the debug cross-check, and errors for tensors on the
 * wrong device and mismatched sizes. Exits 77
 * (skipped) without a GPU, unless DDPLUA_REQUIRE_GPU=1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "distributed/pg.h"
#include "ops/ops.h"
#include "test_util.h"

static const dp_device GPU = {DP_CUDA, 0};

static bool equals(dp_tensor *a, const float *want, int64_t n) {
  dp_tensor *h = dp_to(a, DP_F32, dp_cpu());
  bool ok = h && dp_numel(h) == n && memcmp(dp_data(h), want, sizeof(float) * (size_t)n) == 0;
  dp_release(h);
  return ok;
}

static dp_tensor *gpu_vec(const float *v, int64_t n) {
  dp_tensor *h = dp_empty(DP_F32, 1, &n, dp_cpu());
  memcpy(dp_data(h), v, sizeof(float) * (size_t)n);
  dp_tensor *g = dp_to(h, DP_F32, GPU);
  dp_release(h);
  return g;
}

int main(void) {
  const dp_backend *cuda = dp_backend_require(DP_CUDA);
  if (!cuda || cuda->device_count() < 1) {
    printf("skipped: %s\n", cuda ? "no GPU" : dp_errmsg());
    return getenv("DDPLUA_REQUIRE_GPU") && atoi(getenv("DDPLUA_REQUIRE_GPU")) ? 1 : 77;
  }
  int port = 0;
  char token[40];
  dp_store_make_token(token, sizeof token);
  dp_store_server *srv = dp_store_server_start("127.0.0.1", 0, token, &port);
  dp_store *store = srv ? dp_store_connect("127.0.0.1", port, token, 5000) : NULL;
  CHECK(store != NULL);
  for (int debug = 0; debug < 2 && store; debug++) {
    dp_pg_init in = {.store = store,
                     .rank = 0,
                     .size = 1,
                     .local_rank = 0,
                     .local_size = 1,
                     .node_rank = 0,
                     .nnodes = 1,
                     .timeout_ms = 30000,
                     .debug = debug};
    dp_pg *g = dp_pg_nccl_new(&in);
    if (!g) fprintf(stderr, "nccl init: %s\n", dp_errmsg());
    CHECK(g != NULL);
    if (!g) break;
    CHECK(strcmp(g->ops->name, "nccl") == 0 && g->rank == 0 && g->size == 1);
    float v[4] = {1.f, -2.f, 3.5f, 0.25f};
    dp_tensor *t = gpu_vec(v, 4);
    for (dp_redop op = DP_RED_SUM; op <= DP_RED_PROD; op++) { /* one rank: every reduction is the identity */
      CHECK(g->ops->all_reduce(g, t, op, NULL) == 0);
      CHECK(equals(t, v, 4));
    }
    CHECK(g->ops->broadcast(g, t, 0, NULL) == 0 && equals(t, v, 4));
    CHECK(g->ops->reduce(g, t, 0, DP_RED_SUM, NULL) == 0 && equals(t, v, 4));
    int64_t four = 4;
    dp_tensor *out = dp_zeros(DP_F32, 1, &four, GPU);
    CHECK(g->ops->all_gather(g, out, t, NULL) == 0 && equals(out, v, 4));
    dp_tensor *out2 = dp_zeros(DP_F32, 1, &four, GPU);
    CHECK(g->ops->reduce_scatter(g, out2, t, DP_RED_SUM, NULL) == 0 && equals(out2, v, 4));
    /* async: the handle completes and orders later work */
    dp_work *w = NULL;
    CHECK(g->ops->all_reduce(g, t, DP_RED_SUM, &w) == 0 && w != NULL);
    if (w) {
      CHECK(dp_work_wait(w) == 0);
      CHECK(equals(t, v, 4));
      CHECK(cuda->synchronize(0) == 0 && dp_work_is_completed(w));
      dp_work_release(w);
    }
    CHECK(g->ops->barrier(g) == 0);
    CHECK(g->seq >= 9);
    /* synchronize waits for the communication stream too: an async
     * all_gather of 1 GiB nobody waited for is done when it returns */
    int64_t big = (int64_t)1 << 28;
    dp_tensor *src = dp_full(DP_F32, 1, &big, 1.5, GPU), *dst = dp_zeros(DP_F32, 1, &big, GPU);
    dp_work *wg = NULL;
    CHECK(src && dst && g->ops->all_gather(g, dst, src, &wg) == 0 && wg != NULL);
    CHECK(cuda->synchronize(0) == 0);
    CHECK(wg && dp_work_is_completed(wg));
    dp_work_release(wg);
    CHECK(cuda->synchronize(-1) == 0);
    dp_release(src), dp_release(dst);
    /* sub-group of the one rank */
    dp_pg *sub = NULL;
    int ranks[1] = {0};
    CHECK(g->ops->new_group(g, ranks, 1, &sub) == 0 && sub != NULL);
    if (sub) {
      CHECK(sub->ops->all_reduce(sub, t, DP_RED_MAX, NULL) == 0 && equals(t, v, 4));
      sub->ops->destroy(sub);
    }
    /* errors name the problem */
    dp_tensor *host = dp_zeros(DP_F32, 1, &four, dp_cpu());
    CHECK(g->ops->all_reduce(g, host, DP_RED_SUM, NULL) != 0);
    CHECK(strstr(dp_errmsg(), "the input tensor is on the cpu but the nccl group of rank 0 uses cuda:0") != NULL);
    int64_t three = 3;
    dp_tensor *small = dp_zeros(DP_F32, 1, &three, GPU);
    CHECK(g->ops->all_gather(g, small, t, NULL) != 0);
    CHECK(strstr(dp_errmsg(), "the output must hold 1 x 4 float32 elements") != NULL);
    dp_tensor *ints = dp_zeros(DP_I64, 1, &three, GPU);
    CHECK(g->ops->all_reduce(g, ints, DP_RED_AVG, NULL) != 0 && strstr(dp_errmsg(), "int64") != NULL);
    CHECK(g->ops->broadcast(g, t, 1, NULL) != 0 && strstr(dp_errmsg(), "source rank 1") != NULL);
    int bad[2] = {0, 0};
    CHECK(g->ops->new_group(g, bad, 2, &sub) != 0 && strstr(dp_errmsg(), "ascending") != NULL);
    dp_release(t), dp_release(out), dp_release(out2), dp_release(host), dp_release(small), dp_release(ints);
    g->ops->destroy(g);
  }
  CHECK(cuda->synchronize(-1) == 0);
  dp_store_close(store);
  dp_store_server_stop(srv);
  TEST_DONE();
}
