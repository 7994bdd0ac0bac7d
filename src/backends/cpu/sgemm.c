/* The SGEMM driver: kernel selection, orientation, cache blocking, packing
 * and threads around the per-ISA micro-kernels of sgemm_kernels.h.
 *
 * Structure (GotoBLAS/BLIS): C' += P Q is cut into Q blocks of kc x nc that
 * are packed into panels of up to NR columns and stay in L2, and into
 * MR-row slivers of P that stay in L1 while the micro-kernel sweeps the Q
 * panels. kc grows when the block is narrow (64 columns: no k split, one
 * pass over C); nc grows when k is small (k = 64: P packed once).
 *
 * Orientation: the micro-kernel loads Q as vectors along n, so Q must be
 * packed; that is a copy when Q's rows are contiguous (done by the first
 * sliver's tiles while they compute, so it costs no pass of its own) and a
 * transpose when they are not. C = op(A) op(B) can be computed either as
 * C' = C (P = op(A), Q = op(B)) or as C' = C^T (P = op(B)^T, Q = op(A)^T,
 * stored transposed). The swapped one stores every C tile transposed,
 * which costs about 4 times the packing of one element (measured: 700 x
 * 10000 x 200 runs at 119 GFLOP/s swapped, 153 not), so we swap only when
 * the transposed packing it saves (op(B), k x n) outweighs that and op(A)'s
 * (k x m): small m against k. For x @ W^T with x 64 x 784 and W 1024 x 784
 * that means packing x^T (64 x 784) instead of W^T (1024 x 784), while W's
 * rows are broadcast in place; with x 512 x 768 and W 3072 x 768 it means
 * packing W^T and storing C in rows (153 GFLOP/s instead of 116).
 * P itself is read in place when its rows are contiguous along k (the
 * micro-kernel takes MR row pointers) and packed otherwise (a copy of MR
 * contiguous floats per k). */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"
#include "backends/cpu/sgemm_stats.h"
#include "core/error.h"

/* ---- implementation selection ---- */

static struct {
  pthread_once_t once;
  pthread_mutex_t lock;
  dp_sgemm_impl impl;
  char err[256]; /* non-empty: DDPLUA_GEMM was invalid */
  int threads;
} sel = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER, .threads = 0 /* automatic */};

const char *dp_sgemm_impl_name(dp_sgemm_impl impl) {
  switch (impl) {
  case DP_SGEMM_AVX512: return "avx512";
  case DP_SGEMM_AVX2: return "avx2";
  case DP_SGEMM_BLAS: break;
  }
  return "blas";
}

bool dp_sgemm_cpu_supports(dp_sgemm_impl impl) {
  __builtin_cpu_init();
  switch (impl) {
  case DP_SGEMM_AVX512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("avx2"); /* the transposing packer is AVX2 */
  case DP_SGEMM_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case DP_SGEMM_BLAS: break;
  }
  return true;
}

static dp_sgemm_impl best_impl(void) {
  if (dp_sgemm_cpu_supports(DP_SGEMM_AVX512)) return DP_SGEMM_AVX512;
  if (dp_sgemm_cpu_supports(DP_SGEMM_AVX2)) return DP_SGEMM_AVX2;
  return DP_SGEMM_BLAS;
}

int dp_sgemm_parse_impl(const char *name, dp_sgemm_impl *impl) {
  if (strcmp(name, "own") == 0) *impl = best_impl();
  else if (strcmp(name, "blas") == 0) *impl = DP_SGEMM_BLAS;
  else if (strcmp(name, "avx512") == 0) *impl = DP_SGEMM_AVX512;
  else if (strcmp(name, "avx2") == 0) *impl = DP_SGEMM_AVX2;
  else return dp_error("'%.64s' is not one of own, blas, avx512, avx2", name);
  if (!dp_sgemm_cpu_supports(*impl))
    return dp_error("this CPU does not support the %s GEMM micro-kernel", dp_sgemm_impl_name(*impl));
  return 0;
}

static void select_from_env(void) {
  const char *v = getenv("DDPLUA_GEMM");
  sel.impl = best_impl();
  dp_sgemm_impl want;
  if (!v || !*v) return;
  if (dp_sgemm_parse_impl(v, &want)) snprintf(sel.err, sizeof sel.err, "DDPLUA_GEMM: %s", dp_errmsg());
  else sel.impl = want;
}

int dp_sgemm_get_impl(dp_sgemm_impl *impl) {
  pthread_once(&sel.once, select_from_env);
  pthread_mutex_lock(&sel.lock);
  int rc = sel.err[0] ? dp_error("%s", sel.err) : 0;
  *impl = sel.impl;
  pthread_mutex_unlock(&sel.lock);
  return rc;
}

int dp_sgemm_set_impl(dp_sgemm_impl impl) {
  pthread_once(&sel.once, select_from_env);
  if (!dp_sgemm_cpu_supports(impl))
    return dp_error("this CPU does not support the %s GEMM micro-kernel", dp_sgemm_impl_name(impl));
  pthread_mutex_lock(&sel.lock);
  sel.impl = impl;
  sel.err[0] = 0;
  pthread_mutex_unlock(&sel.lock);
  return 0;
}

void dp_sgemm_set_num_threads(int n) { __atomic_store_n(&sel.threads, n < 1 ? 1 : n, __ATOMIC_RELAXED); }

/* The automatic count (PyTorch's rule): this process's cores (its CPU
 * affinity) shared by the ranks on the node (LOCAL_WORLD_SIZE, which the
 * launcher and dist.spawn set), at least 1. Computed at first use and again
 * in a forked child (dist.spawn sets the child's LOCAL_WORLD_SIZE after the
 * fork, before the rank's first kernel). */
static int auto_threads_cached; /* atomic; 0: not yet */
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static void auto_reset_in_child(void) { auto_threads_cached = 0; }
static void auto_register(void) { pthread_atfork(NULL, NULL, auto_reset_in_child); }

int dp_sgemm_auto_threads(void) {
  pthread_once(&auto_once, auto_register);
  int n = __atomic_load_n(&auto_threads_cached, __ATOMIC_RELAXED);
  if (n > 0) return n;
  cpu_set_t set;
  long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  const char *lws = getenv("LOCAL_WORLD_SIZE");
  long ranks = lws ? strtol(lws, NULL, 10) : 1;
  if (ranks < 1) ranks = 1;
  long t = cores / ranks;
  n = t < 1 ? 1 : t > DP_SG_MAX_THREADS ? DP_SG_MAX_THREADS : (int)t;
  __atomic_store_n(&auto_threads_cached, n, __ATOMIC_RELAXED);
  return n;
}

int dp_sgemm_get_num_threads(void) {
  int n = __atomic_load_n(&sel.threads, __ATOMIC_RELAXED);
  return n > 0 ? n : dp_sgemm_auto_threads();
}

/* ---- packing buffers: per thread, allocated on first use ---- */

typedef struct {
  float *q, *p;
  size_t q_floats, p_floats;
} pack_bufs;

static pthread_key_t bufs_key;
static pthread_once_t bufs_once = PTHREAD_ONCE_INIT;

static void free_bufs(void *v) {
  pack_bufs *b = v;
  free(b->q);
  free(b->p);
  free(b);
}
static void make_bufs_key(void) { DP_ASSERT(pthread_key_create(&bufs_key, free_bufs) == 0); }

static float *alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  return aligned_alloc(64, bytes);
}

static pack_bufs *get_bufs(size_t q_floats, size_t p_floats) {
  pthread_once(&bufs_once, make_bufs_key);
  pack_bufs *b = pthread_getspecific(bufs_key);
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b || pthread_setspecific(bufs_key, b)) {
      free(b);
      dp_error("matmul: out of memory for GEMM packing buffers");
      return NULL;
    }
  }
  if (b->q_floats < q_floats) {
    free(b->q);
    b->q = alloc_floats(q_floats);
    b->q_floats = b->q ? q_floats : 0;
  }
  if (b->p_floats < p_floats) {
    free(b->p);
    b->p = alloc_floats(p_floats);
    b->p_floats = b->p ? p_floats : 0;
  }
  if (!b->q || !b->p) {
    dp_error("matmul: out of memory for GEMM packing buffers (%zu bytes)", (q_floats + p_floats) * sizeof(float));
    return NULL;
  }
  return b;
}

/* ---- packing ---- */

/* A strided matrix: element (i, j) at p[i * rs + j * cs]. */
typedef struct {
  const float *p;
  int64_t rs, cs;
} view;

static dp_sg_panels plan_panels(const dp_sg_kernel *K, int64_t nc) {
  int vectors = (int)((nc + K->vl - 1) / K->vl), nv = K->nr / K->vl;
  dp_sg_panels pl = {.vl = K->vl, .panels = (vectors + nv - 1) / nv};
  pl.base = vectors / pl.panels;
  pl.extra = vectors % pl.panels;
  return pl;
}

/* Q block (kc x nc, from row pc, column jc) stored with contiguous columns,
 * packed panel after panel, each dst[p * nrpad + j] with nrpad its width
 * rounded up to whole vectors. (Blocks with contiguous rows are packed by
 * the micro-kernel as it reads them: dp_sg_tile.b_src.) */
static void pack_q(const dp_sg_kernel *K, const dp_sg_panels *pl, view q, int64_t kc, int64_t nc, float *dst) {
  DP_ASSERT(q.rs == 1);
  int64_t j0 = 0;
  for (int t = 0; t < pl->panels; t++) {
    int nrpad = dp_sg_panel_cols(pl, t);
    int w = (int)(nc - j0 < nrpad ? nc - j0 : nrpad);
    const float *src = q.p + j0 * q.cs;
    K->pack_q_trans(kc, w, nrpad, src, q.cs, dst);
    dst += kc * nrpad;
    j0 += nrpad;
  }
}

/* mr rows of P (from row ir, column pc) as dst[p * MR + r], rows past mr
 * zero. Only P whose columns are contiguous is packed (rows contiguous
 * along k are read in place), so this is a copy of mr floats per k. */
static void pack_p(const dp_sg_kernel *K, view pv, int mr, int64_t kc, float *dst) {
  DP_ASSERT(pv.rs == 1);
  K->pack_p(kc, mr, K->mr, pv.p, pv.cs, dst);
}

/* ---- the blocked product ---- */

typedef struct {
  const dp_sg_kernel *K;
  int64_t m, n, k;
  float alpha, beta;
  view P, Q;
  float *c;
  int64_t c_rs, c_cs;
  const float *bias_n, *bias_m; /* dp_sgemm_run_bias's bias along C' columns or rows (NULL: none) */
} problem;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Splits len into equal blocks of at most max, each a multiple of unit
 * (except the last), so no block is a sliver. */
static int64_t balanced_block(int64_t len, int64_t max, int64_t unit) {
  int64_t nb = ceil_div(len, max);
  return ceil_div(ceil_div(len, nb), unit) * unit;
}

static int run_blocked(const problem *pr) {
  const dp_sg_kernel *K = pr->K;
  const int MR = K->mr;
  /* n in blocks that fit L2 with a kc of K->kc (or k); then kc as large as the L2
   * budget allows for that block width (up to what keeps P's sliver in L1):
   * fewer passes over C, and for narrow n (64 columns) no k split at all */
  int64_t nc_max = K->l2_floats / (pr->k < K->kc ? pr->k : K->kc); /* small k: wider blocks, P packed once */
  int64_t nc_blk = balanced_block(pr->n, nc_max > K->nc ? nc_max : K->nc, K->vl);
  int64_t kc_cap = K->l2_floats / nc_blk;
  kc_cap = kc_cap < K->kc ? K->kc : (kc_cap > K->kc_max ? K->kc_max : kc_cap);
  int64_t kc_blk = balanced_block(pr->k, kc_cap, 1);
  /* A k that one block can hold whole while the block stays at least 4
   * panels wide is not split: narrower blocks re-read P once more each, a
   * k split reads and writes all of C once more, and C is the larger. On
   * one Zen 4 core (bench/gemm.lua evict=1, the k = 384 rows of a
   * 384-wide GPT) x @ W^T at 2048 x 1152 x 384 runs 90-94 -> 100-103
   * GFLOP/s (OpenBLAS 97-101); g @ W at 2048 x 1536 x 384 95-100 -> 98-106,
   * within the spread. With P packed (the swapped weight gradients, k =
   * 700) or blocks under 4 panels it measured no better, so those keep the
   * split. */
  if (kc_blk < pr->k && pr->k <= K->kc_max && K->l2_floats / pr->k >= 4 * K->nr && pr->P.cs == 1) {
    kc_blk = pr->k;
    nc_blk = balanced_block(pr->n, K->l2_floats / pr->k, K->vl);
  }
  /* panels round up to whole vectors */
  pack_bufs *bufs = get_bufs((size_t)(kc_blk * (nc_blk + K->nr)), (size_t)(kc_blk * MR));
  if (!bufs) return -1;
  const bool p_in_place = pr->P.cs == 1;
  for (int64_t jc = 0; jc < pr->n; jc += nc_blk) {
    int64_t nc = pr->n - jc < nc_blk ? pr->n - jc : nc_blk;
    dp_sg_panels pl = plan_panels(K, nc);
    for (int64_t pc = 0; pc < pr->k; pc += kc_blk) {
      int64_t kc = pr->k - pc < kc_blk ? pr->k - pc : kc_blk;
      view qb = {pr->Q.p + pc * pr->Q.rs + jc * pr->Q.cs, pr->Q.rs, pr->Q.cs};
      /* Q with contiguous rows is packed by the first sliver's tiles as
       * they read it (dp_sg_tile.b_src); otherwise in a pass of its own */
      const bool fill = qb.cs == 1;
      if (!fill) pack_q(K, &pl, qb, kc, nc, bufs->q);
      /* the bias joins the last k block's store: C is then complete, and
       * gets it as one add after, as a separate pass would */
      const bool last_k = pc + kc == pr->k;
      dp_sg_tile t = {.k = kc,
                      .alpha = pr->alpha,
                      .beta = pc == 0 ? pr->beta : 1.0f,
                      .c_rs = pr->c_rs,
                      .c_cs = pr->c_cs,
                      .b_rs = qb.rs};
      for (int64_t ir = 0; ir < pr->m; ir += MR) {
        t.mr = (int)(pr->m - ir < MR ? pr->m - ir : MR);
        t.bias_m = last_k && pr->bias_m ? pr->bias_m + ir : NULL;
        view pv = {pr->P.p + ir * pr->P.rs + pc * pr->P.cs, pr->P.rs, pr->P.cs};
        if (p_in_place) {
          t.a = pv.p;
          t.a_rs = pv.rs;
          t.a_packed = false;
        } else {
          pack_p(K, pv, t.mr, kc, bufs->p);
          t.a = bufs->p;
          t.a_rs = 1;
          t.a_packed = true;
        }
        float *b = bufs->q;
        int64_t jr = 0;
        for (int pt = 0; pt < pl.panels; pt++) {
          int nrpad = dp_sg_panel_cols(&pl, pt);
          t.nr = (int)(nc - jr < nrpad ? nc - jr : nrpad);
          t.b = b;
          t.b_src = fill && ir == 0 ? qb.p + jr : NULL;
          t.b_fill = b;
          t.c = pr->c + ir * pr->c_rs + (jc + jr) * pr->c_cs;
          t.bias_n = last_k && pr->bias_n ? pr->bias_n + jc + jr : NULL;
          K->tile(&t);
          b += kc * nrpad;
          jr += nrpad;
        }
      }
    }
  }
  return 0;
}

/* C = beta * C (k == 0 or alpha == 0: A and B are not read, as in BLAS). */
static void scale_c(float *c, int64_t m, int64_t n, int64_t ldc, float beta) {
  for (int64_t i = 0; i < m; i++) {
    float *row = c + i * ldc;
    if (beta == 0.0f) memset(row, 0, sizeof(float) * (size_t)n);
    else
      for (int64_t j = 0; j < n; j++) row[j] *= beta;
  }
}

/* ---- calls: orientation, batches, threads ---- */

typedef struct {
  const dp_gemm_args *g;
  const float *bias; /* dp_sgemm_run_bias: per column of C, or NULL */
  const dp_sg_kernel *K;
  bool swap;
  enum { SPLIT_BATCH, SPLIT_M, SPLIT_N } how;
  int parts;
  pthread_mutex_t err_lock;
  bool failed;
  char err[256];
} call_plan;

/* Batch item b as C' += P Q. The micro-kernel loads Q as vectors and must
 * pack it; the transposed packing each orientation needs is op(B) when B is
 * stored transposed (normal), op(A) when A is not (swapped). */
static problem item_problem(const call_plan *cp, int64_t b) {
  const dp_gemm_args *g = cp->g;
  const float *a = (const float *)g->a + b * g->stride_a;
  const float *bm = (const float *)g->b + b * g->stride_b;
  /* element strides of op(A) (m x k) and op(B) (k x n) */
  const int64_t a_rs = g->trans_a ? 1 : g->lda, a_cs = g->trans_a ? g->lda : 1;
  const int64_t b_rs = g->trans_b ? 1 : g->ldb, b_cs = g->trans_b ? g->ldb : 1;
  problem pr = {
      .K = cp->K, .k = g->k, .alpha = (float)g->alpha, .beta = (float)g->beta, .c = (float *)g->c + b * g->stride_c};
  if (!cp->swap) {
    pr.m = g->m, pr.n = g->n;
    pr.P = (view){a, a_rs, a_cs};
    pr.Q = (view){bm, b_rs, b_cs};
    pr.c_rs = g->ldc, pr.c_cs = 1;
    pr.bias_n = cp->bias;
  } else { /* C^T = op(B)^T op(A)^T */
    pr.m = g->n, pr.n = g->m;
    pr.P = (view){bm, b_cs, b_rs};
    pr.Q = (view){a, a_cs, a_rs};
    pr.c_rs = 1, pr.c_cs = g->ldc;
    pr.bias_m = cp->bias; /* C's columns are C''s rows */
  }
  return pr;
}

/* Part `part` of `parts` of pr: a range of whole MR-row slivers (SPLIT_M)
 * or NR-column panels (SPLIT_N) of C'; each part packs what it reads, so
 * parts never wait for each other. */
static int run_part(const call_plan *cp, problem pr, int part) {
  if (cp->how == SPLIT_BATCH || cp->parts == 1) return run_blocked(&pr);
  const bool by_m = cp->how == SPLIT_M;
  const int64_t len = by_m ? pr.m : pr.n, unit = by_m ? pr.K->mr : pr.K->nr;
  const int64_t units = ceil_div(len, unit);
  const int64_t lo = units * part / cp->parts * unit, hi = units * (part + 1) / cp->parts * unit;
  if (lo >= len) return 0;
  const int64_t cnt = (hi < len ? hi : len) - lo;
  if (by_m) {
    pr.P.p += lo * pr.P.rs;
    pr.c += lo * pr.c_rs;
    pr.m = cnt;
    if (pr.bias_m) pr.bias_m += lo;
  } else {
    pr.Q.p += lo * pr.Q.cs;
    pr.c += lo * pr.c_cs;
    pr.n = cnt;
    if (pr.bias_n) pr.bias_n += lo;
  }
  return run_blocked(&pr);
}

static void run_part_fn(void *ctx, int part) {
  call_plan *cp = ctx;
  int rc = 0;
  if (cp->how == SPLIT_BATCH) {
    for (int64_t b = part; b < cp->g->batch && !rc; b += cp->parts) rc = run_part(cp, item_problem(cp, b), part);
  } else {
    for (int64_t b = 0; b < cp->g->batch && !rc; b++) rc = run_part(cp, item_problem(cp, b), part);
  }
  if (rc) { /* dp_error is per thread: hand the message to the caller */
    pthread_mutex_lock(&cp->err_lock);
    if (!cp->failed) snprintf(cp->err, sizeof cp->err, "%s", dp_errmsg());
    cp->failed = true;
    pthread_mutex_unlock(&cp->err_lock);
  }
}

/* Threads pay for themselves above ~4 MFLOP each (20 us at 200 GFLOP/s;
 * waking a parked thread costs a few us). */
#define MIN_FLOPS_PER_THREAD 4e6

static void plan_threads(call_plan *cp) {
  const dp_gemm_args *g = cp->g;
  const int threads = dp_sgemm_get_num_threads() < DP_SG_MAX_THREADS ? dp_sgemm_get_num_threads() : DP_SG_MAX_THREADS;
  const double item_flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
  cp->how = SPLIT_M;
  cp->parts = 1;
  if (threads <= 1) return;
  /* split the side of C' with more tiles (64 x 1024: columns; 1024 x 64:
   * rows), each part then packs its own share of what it reads */
  problem pr = item_problem(cp, 0);
  int64_t m_units = ceil_div(pr.m, cp->K->mr), n_units = ceil_div(pr.n, cp->K->nr);
  int64_t units = m_units >= n_units ? m_units : n_units;
  int64_t by_work = (int64_t)(item_flops / MIN_FLOPS_PER_THREAD);
  int64_t parts = threads < units ? threads : units;
  parts = parts < by_work ? parts : by_work;
  if (parts >= 2) {
    cp->how = m_units >= n_units ? SPLIT_M : SPLIT_N;
    cp->parts = (int)parts;
    return;
  }
  by_work = (int64_t)(item_flops * (double)g->batch / MIN_FLOPS_PER_THREAD);
  parts = threads < g->batch ? threads : g->batch;
  parts = parts < by_work ? parts : by_work;
  if (parts >= 2) {
    cp->how = SPLIT_BATCH;
    cp->parts = (int)parts;
  }
}

/* The orientation (top of the file): C^T when both operands are stored
 * transposed, else when op(B)'s transposed packing (k x n) costs more than
 * op(A)'s (k x m) plus C's transposed stores (m x n, 4 packings each).
 * With A stored transposed and B not (a weight gradient g^T x) neither
 * orientation transposes Q, but the one whose P is the wider operand packs
 * it (a copy of MR floats per k, rows k apart): C^T when op(A)'s k x m
 * packing costs more than op(B)'s k x n plus the transposed stores, which
 * count 2.5 here (a store of C is spread over the k blocks). For the GPT
 * example's g^T x with g 2048 x 512 and x 2048 x 128 that runs at 128
 * GFLOP/s instead of 106 (384 x 128: 132 instead of 123); 128 x 512 stays
 * as it is (142, 103 swapped). On the AMD EPYC of 2026-12-03 (bench/gemm.lua,
 * "bwd dW" rows) the LSTM example's decoder 10000 x 200 x 700 runs at 95
 * GFLOP/s swapped against 87, its 800 x 200 x 700 at 101 against 94, and
 * 1024 x 64 x 192 at 97 against 78; 1000 x 500 x 2000 and 4096 x 512 x 1024
 * stay (98 and 101 against 87 and 84 swapped), as a weight of 4 had them. */
static bool swap_pays(const dp_gemm_args *g) {
  const double m = (double)g->m, n = (double)g->n, k = (double)g->k;
  if (!g->trans_b) return g->trans_a && k * m > k * n + 2.5 * m * n;
  if (g->trans_a) return true;
  return k * n > 4.0 * m * n + k * m;
}

int dp_sgemm_run(dp_sgemm_impl impl, const dp_gemm_args *g) { return dp_sgemm_run_bias(impl, g, NULL); }

static int run_bias(dp_sgemm_impl impl, const dp_gemm_args *g, const float *bias) {
  DP_ASSERT(g->dtype == DP_F32);
  DP_ASSERT(impl == DP_SGEMM_AVX512 || impl == DP_SGEMM_AVX2);
  if (!dp_sgemm_cpu_supports(impl))
    return dp_error("this CPU does not support the %s GEMM micro-kernel", dp_sgemm_impl_name(impl));
  if (g->m <= 0 || g->n <= 0 || g->batch <= 0) return 0;
  if (g->k <= 0 || (float)g->alpha == 0.0f) {
    for (int64_t b = 0; b < g->batch; b++) {
      float *c = (float *)g->c + b * g->stride_c;
      scale_c(c, g->m, g->n, g->ldc, (float)g->beta);
      for (int64_t i = 0; bias && i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) c[i * g->ldc + j] += bias[j];
    }
    return 0;
  }
  call_plan cp = {.g = g,
                  .bias = bias,
                  .K = impl == DP_SGEMM_AVX512 ? &dp_sg_avx512 : &dp_sg_avx2,
                  .swap = swap_pays(g),
                  .err_lock = PTHREAD_MUTEX_INITIALIZER};
  plan_threads(&cp);
  dp_sg_parallel(cp.parts, run_part_fn, &cp);
  pthread_mutex_destroy(&cp.err_lock);
  if (cp.failed) return dp_error("%s", cp.err);
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int dp_sgemm_run_bias(dp_sgemm_impl impl, const dp_gemm_args *g, const float *bias) {
  if (!dp_sgemm_stats_enabled()) return run_bias(impl, g, bias);
  double t0 = now_s();
  int rc = run_bias(impl, g, bias);
  dp_sgemm_stats_add(g, now_s() - t0);
  return rc;
}
