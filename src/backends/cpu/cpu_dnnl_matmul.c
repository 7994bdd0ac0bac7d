/* oneDNN bfloat16 matmuls (dp_dnnl_gemm_bf16, cpu_dnnl.h): one matmul
 * primitive per shape, strides and bias, cached (up to DP_DNNL_CACHE_MAX)
 * under the lock the convolutions' cache uses; a large product split over
 * the GEMM pool's threads (see "one matmul over the GEMM pool's threads"),
 * each part on its thread's stream with a scratchpad of its own; a shape
 * oneDNN has no implementation for returns 0 and the caller widens to
 * float32. Where the CPU computes bfloat16 natively (AMX, AVX512-BF16:
 * dp_cpu_native_bf16). */
#include "backends/cpu/cpu_dnnl.h"

#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_vec.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"

#ifndef DDPLUA_HAVE_DNNL
int dp_dnnl_gemm_bf16(const dp_gemm_args *g, const void *bias) {
  (void)g, (void)bias;
  return 0;
}
bool dp_cpu_native_bf16(void) { return false; }
#else

#include <pthread.h>
#include <stdio.h>

#include "backends/cpu/cpu_dnnl_core.h"
#include "core/error.h"

bool dp_cpu_native_bf16(void) {
  static int known = -1;
  if (known < 0) {
    const char *d = dp_cpu_describe(), *force = getenv("DDPLUA_DNNL_BF16");
    known = (strstr(d, "amx_bf16") || strstr(d, "avx512_bf16") || (force && strcmp(force, "1") == 0)) ? 1 : 0;
  }
  return known == 1;
}

typedef struct { /* all int64: compared with memcmp */
  int64_t ta, tb, m, n, k, batch, lda, ldb, ldc, sa, sb, sc, beta, bias;
} mm_key;

typedef struct mm_entry {
  mm_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t a, b, c, bias;
  size_t scratch;
  struct mm_entry *next;
} mm_entry;

static mm_entry *mm_cache;
static int mm_cached;

/* a [batch, rows, cols] view with the given strides (batch stride 0: one
 * matrix broadcast over the batch) */
static void md3(dnnl_memory_desc_t *m, int64_t batch, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs,
                dnnl_data_type_t dt) {
  dnnl_dims_t dims = {bs == 0 ? 1 : batch, rows, cols}, strides = {bs == 0 ? rows * cols : bs, rs, cs};
  dnnl_memory_desc_init_by_strides(m, 3, dims, dt, strides);
}

static int mm_make(const mm_key *k, mm_entry **out) {
  dp_dnnl_one_omp_thread();
  *out = NULL;
  mm_entry *e = calloc(1, sizeof *e);
  if (!e) return dp_error("oneDNN: out of memory for a matmul primitive");
  e->key = *k;
  md3(&e->a, k->batch, k->m, k->k, k->sa, k->ta ? 1 : k->lda, k->ta ? k->lda : 1, dnnl_bf16);
  md3(&e->b, k->batch, k->k, k->n, k->sb, k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1, dnnl_bf16);
  md3(&e->c, k->batch, k->m, k->n, k->sc, k->ldc, 1, dnnl_bf16);
  if (k->bias) md3(&e->bias, 1, 1, k->n, 0, k->n, 1, dnnl_bf16); /* one row, broadcast over batch and rows */
  dnnl_matmul_desc_t md;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  bool ok = dnnl_matmul_desc_init(&md, &e->a, &e->b, k->bias ? &e->bias : NULL, &e->c) == dnnl_success &&
            dnnl_primitive_attr_create(&attr) == dnnl_success &&
            dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
  if (ok && k->beta) /* C += A B */
    ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
  ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, dp_dnnl_engine(), NULL) == dnnl_success;
  if (ok) {
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
    ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) { /* no implementation: the caller widens to float32 */
    free(e);
    return 0;
  }
  *out = e;
  return 0;
}

/* The cached primitive for `key` (made on the calling thread, so its
 * jit kernels take one OpenMP thread); *temp: past the cache's size, the
 * caller frees it (mm_free). *e NULL: oneDNN has no implementation. */
static int mm_get(const mm_key *key, mm_entry **e, bool *temp) {
  *e = NULL, *temp = false;
  dp_dnnl_cache_lock();
  for (mm_entry *c = mm_cache; c; c = c->next)
    if (memcmp(&c->key, key, sizeof *key) == 0) *e = c;
  dp_dnnl_cache_unlock();
  if (*e) return 0;
  if (mm_make(key, e)) return -1;
  if (!*e) return 0;
  dp_dnnl_cache_lock();
  if (mm_cached < DP_DNNL_CACHE_MAX) {
    (*e)->next = mm_cache, mm_cache = *e, mm_cached++;
  } else {
    *temp = true;
  }
  dp_dnnl_cache_unlock();
  return 0;
}

static void mm_free(mm_entry *e) {
  dnnl_primitive_destroy(e->prim);
  free(e);
}

/* Runs primitive e on A, B, C (and bias) on the calling thread's stream. */
static int mm_run(const mm_entry *e, const void *a, const void *b, void *c, const void *bias) {
  dnnl_stream_t st = dp_dnnl_thread_stream();
  void *scratch = e->scratch ? dp_dnnl_thread_scratch(e->scratch) : NULL;
  dnnl_memory_t m[5] = {NULL, NULL, NULL, NULL, NULL};
  dnnl_memory_desc_t sp_md;
  dnnl_dims_t sd = {(int64_t)e->scratch};
  dnnl_memory_desc_init_by_tag(&sp_md, 1, sd, dnnl_u8, dnnl_x);
  int rc = st && (!e->scratch || scratch) ? 0 : dp_error("oneDNN: no stream or scratch memory for a matmul");
  if (!rc && (dnnl_memory_create(&m[0], &e->a, dp_dnnl_engine(), (void *)a) != dnnl_success ||
              dnnl_memory_create(&m[1], &e->b, dp_dnnl_engine(), (void *)b) != dnnl_success ||
              dnnl_memory_create(&m[2], &e->c, dp_dnnl_engine(), c) != dnnl_success ||
              (scratch && dnnl_memory_create(&m[3], &sp_md, dp_dnnl_engine(), scratch) != dnnl_success) ||
              (bias && dnnl_memory_create(&m[4], &e->bias, dp_dnnl_engine(), (void *)bias) != dnnl_success)))
    rc = dp_error("oneDNN: memory for a matmul failed");
  if (!rc) {
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    int na = 3;
    if (scratch) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[3]};
    if (bias) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, m[4]};
    dp_dnnl_count_calls(1);
    if (dnnl_primitive_execute(e->prim, st, na, args) != dnnl_success || dnnl_stream_wait(st) != dnnl_success)
      rc = dp_error("oneDNN: a bfloat16 matmul failed");
  }
  for (int i = 0; i < 5; i++)
    if (m[i]) dnnl_memory_destroy(m[i]);
  return rc;
}

/* ---- one matmul over the GEMM pool's threads ----
 * oneDNN's own threads are held at one (cpu_dnnl_core.c), so a process
 * with spare cores splits the product itself: C's rows (or, when C is
 * wider than tall, its columns) in parts of whole SPLIT_ALIGN blocks, one
 * part per pool thread, each part a matmul of its own shape (at most two
 * shapes: the full parts and the last), run on its thread's stream with
 * its own scratchpad. Parts below PART_MIN_FLOP are not worth a wake-up. */
enum { SPLIT_ALIGN = 32 };
#define PART_MIN_FLOP 4e6

typedef struct {
  const dp_gemm_args *g;
  const void *bias;
  bool by_rows;
  int64_t chunk; /* rows (or columns) per part; the last part has the rest */
  mm_entry *full, *last;
  int failed; /* atomic */
  char err[256];
} mm_split;

static void mm_part(void *vctx, int part) {
  mm_split *s = vctx;
  const dp_gemm_args *g = s->g;
  int64_t lo = part * s->chunk, whole = s->by_rows ? g->m : g->n;
  const mm_entry *e = lo + s->chunk >= whole ? s->last : s->full;
  const uint16_t *a = g->a, *b = g->b, *bias = s->bias;
  uint16_t *c = g->c;
  if (s->by_rows) {
    a += g->trans_a ? lo : lo * g->lda;
    c += lo * g->ldc;
  } else {
    b += g->trans_b ? lo * g->ldb : lo;
    c += lo;
    if (bias) bias += lo;
  }
  dp_dnnl_one_omp_thread();
  if (mm_run(e, a, b, c, bias) && !__atomic_exchange_n(&s->failed, 1, __ATOMIC_ACQ_REL))
    snprintf(s->err, sizeof s->err, "%s", dp_errmsg());
}

/* How many parts: one per pool thread while each keeps PART_MIN_FLOP and a
 * whole SPLIT_ALIGN block of the split axis. */
static int mm_parts(const dp_gemm_args *g, int64_t along) {
  int threads = dp_sgemm_get_num_threads();
  if (threads > DP_SG_MAX_THREADS) threads = DP_SG_MAX_THREADS;
  double flop = 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch;
  int parts = 1;
  while (parts < threads && flop / (parts + 1) >= PART_MIN_FLOP && along / (parts + 1) >= SPLIT_ALIGN) parts++;
  return parts;
}

int dp_dnnl_gemm_bf16(const dp_gemm_args *g, const void *bias) {
  if (!dp_dnnl_available() || g->dtype != DP_BF16 || g->alpha != 1.0 || (g->beta != 0.0 && g->beta != 1.0) ||
      g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0)
    return 0;
  bool by_rows = g->m >= g->n;
  int64_t along = by_rows ? g->m : g->n;
  int parts = dp_sg_in_parallel() ? 1 : mm_parts(g, along);
  int64_t chunk = (along + parts - 1) / parts;
  chunk = (chunk + SPLIT_ALIGN - 1) / SPLIT_ALIGN * SPLIT_ALIGN;
  parts = (int)((along + chunk - 1) / chunk);
  int64_t rest = along - (parts - 1) * chunk;
  mm_key key = {g->trans_a, g->trans_b, g->m,        g->n,        g->k,        g->batch,       g->lda,
                g->ldb,     g->ldc,     g->stride_a, g->stride_b, g->stride_c, g->beta != 0.0, bias != NULL};
  mm_key last_key = key;
  if (by_rows) key.m = parts > 1 ? chunk : g->m, last_key.m = rest;
  else key.n = parts > 1 ? chunk : g->n, last_key.n = rest;
  mm_entry *full = NULL, *last = NULL;
  bool full_temp = false, last_temp = false;
  int rc = mm_get(&key, &full, &full_temp);
  if (!rc && full && parts > 1 && rest != chunk) rc = mm_get(&last_key, &last, &last_temp);
  else last = full;
  if (!rc && full && last) {
    mm_split s = {
        .g = g, .bias = bias, .by_rows = by_rows, .chunk = parts > 1 ? chunk : along, .full = full, .last = last};
    if (parts > 1) dp_sg_parallel(parts, mm_part, &s);
    else mm_part(&s, 0);
    if (s.failed) rc = dp_error("%s", s.err);
  }
  if (full && full_temp) mm_free(full);
  if (last && last != full && last_temp) mm_free(last);
  if (rc) return -1;
  return full && last ? 1 : 0;
}

#endif
