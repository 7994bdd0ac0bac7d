/* oneDNN convolutions (see cpu_dnnl.h; the primitives, their cache and the
 * choice of algorithm are in cpu_dnnl_conv_prim.c, the bfloat16 matmuls in
 * cpu_dnnl_matmul.c, the engine, streams, cache lock and reorders all use
 * in cpu_dnnl_core.c).
 *
 * A convolution call: the user tensors are NCHW / OIHW; each primitive
 * works in the blocked layouts oneDNN picks for this CPU (nChw16c, ...),
 * so inputs are reordered into scratch buffers and outputs reordered back,
 * each a pass over memory that costs far less than the im2col buffer it
 * replaces. The weights are reordered once per call on the calling
 * thread; the batch is split into chunks over the threads, each chunk one
 * execution of a primitive made for its size, with its thread's scratchpad, so
 * executions never share state. The weight gradient sums the chunks'
 * partial gradients (in float32 for bfloat16 calls, rounded once). */
#include "backends/cpu/cpu_dnnl.h"

#include <stdlib.h>

#ifndef DDPLUA_HAVE_DNNL
int dp_dnnl_conv2d(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window2d *g) {
  (void)y, (void)x, (void)w, (void)b, (void)g;
  return 0;
}
int dp_dnnl_conv2d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_tensor *w, const dp_window2d *g) {
  (void)gx, (void)gw, (void)gb, (void)gy, (void)x, (void)w, (void)g;
  return 0;
}
long dp_dnnl_bf16_conv_calls(void) { return 0; }
bool dp_dnnl_conv2d_bf16_pays(const dp_window2d *g) {
  (void)g;
  return false; /* no bfloat16 convolution kernel here: float32, rounded */
}
int dp_dnnl_conv3d(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window3d *g) {
  (void)y, (void)x, (void)w, (void)b, (void)g;
  return 0;
}
int dp_dnnl_conv3d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_tensor *w, const dp_window3d *g) {
  (void)gx, (void)gw, (void)gb, (void)gy, (void)x, (void)w, (void)g;
  return 0;
}
#else

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_dnnl_conv_prim.h"
#include "backends/cpu/cpu_dnnl_core.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_kernels.h"
#include "core/error.h"
#include "tensor/storage.h"

/* ---- primitives: cpu_dnnl_conv_prim.c ---- */

/* ---- execution ---- */

/* One execution of e: inputs a, b and output c in the user's layout (a,
 * b already in the primitive's when a_ready, b_ready), bias / diff_bias
 * (x layout) may be NULL. */
static int run_entry_ready(const conv_entry *e, const void *a, bool a_ready, const void *b, bool b_ready, void *c,
                           void *bias) {
  dnnl_stream_t st = dp_dnnl_thread_stream();
  if (!st) return dp_error("oneDNN: cannot create a stream");
  void *buf[3] = {NULL, NULL, NULL}, *ptr[3] = {(void *)a, (void *)b, c}, *scratch = NULL;
  size_t size[3] = {0, 0, 0};
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    if (!e->reorder[i] || (i == 0 && a_ready) || (i == 1 && b_ready)) continue;
    size[i] = dnnl_memory_desc_get_size(&e->md[i]);
    if (!(buf[i] = dp_cpu_alloc(size[i]))) rc = dp_error("oneDNN: out of memory (%zu bytes)", size[i]);
    else if (i < 2) rc = dp_dnnl_exec_reorder(e->reorder[i], &e->user[i], ptr[i], &e->md[i], buf[i], st);
    if (!rc) ptr[i] = buf[i];
  }
  if (!rc && e->scratch && !(scratch = dp_dnnl_thread_scratch(e->scratch))) rc = -1;
  dnnl_memory_t m[5] = {NULL, NULL, NULL, NULL, NULL};
  dnnl_memory_desc_t bias_md, sp_md;
  dnnl_dims_t bd = {e->key.o};
  /* a bfloat16 forward's bias is the caller's bfloat16; a weight gradient's bias gradient float32 (key_dt) */
  dnnl_data_type_t bias_dt = e->key.bf16 && e->key.kind == K_FWD_BIAS ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_init_by_tag(&bias_md, 1, bd, bias_dt, dnnl_x);
  dnnl_dims_t sd = {(int64_t)e->scratch};
  dnnl_memory_desc_init_by_tag(&sp_md, 1, sd, dnnl_u8, dnnl_x);
  for (int i = 0; i < 3 && !rc; i++)
    if (dnnl_memory_create(&m[i], &e->md[i], dp_dnnl_engine(), ptr[i]) != dnnl_success)
      rc = dp_error("oneDNN: memory failed");
  if (!rc && bias && dnnl_memory_create(&m[3], &bias_md, dp_dnnl_engine(), bias) != dnnl_success)
    rc = dp_error("oneDNN: memory failed");
  if (!rc && scratch && dnnl_memory_create(&m[4], &sp_md, dp_dnnl_engine(), scratch) != dnnl_success)
    rc = dp_error("oneDNN: memory failed");
  if (!rc) {
    int ids[3];
    int bias_id = DNNL_ARG_BIAS;
    switch (e->key.kind) {
    case K_BWD_DATA: ids[0] = DNNL_ARG_DIFF_DST, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DIFF_SRC; break;
    case K_BWD_WEIGHTS:
    case K_BWD_WEIGHTS_BIAS:
      ids[0] = DNNL_ARG_SRC, ids[1] = DNNL_ARG_DIFF_DST, ids[2] = DNNL_ARG_DIFF_WEIGHTS, bias_id = DNNL_ARG_DIFF_BIAS;
      break;
    default: ids[0] = DNNL_ARG_SRC, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DST; break;
    }
    dnnl_exec_arg_t args[5];
    int n = 0;
    for (int i = 0; i < 3; i++) args[n++] = (dnnl_exec_arg_t){ids[i], m[i]};
    if (m[3]) args[n++] = (dnnl_exec_arg_t){bias_id, m[3]};
    if (m[4]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[4]};
    if (dnnl_primitive_execute(e->prim, st, n, args) != dnnl_success || dnnl_stream_wait(st) != dnnl_success)
      rc = dp_error("oneDNN: a convolution failed");
  }
  if (!rc && buf[2]) rc = dp_dnnl_exec_reorder(e->reorder[2], &e->md[2], buf[2], &e->user[2], c, st);
  for (int i = 0; i < 5; i++)
    if (m[i]) dnnl_memory_destroy(m[i]);
  for (int i = 0; i < 3; i++)
    if (buf[i]) dp_cpu_free(buf[i], size[i]);
  return rc;
}

static int run_entry(const conv_entry *e, const void *a, const void *b, bool b_ready, void *c, void *bias) {
  return run_entry_ready(e, a, false, b, b_ready, c, bias);
}

/* ---- calls: chunks of the batch over the threads ---- */

typedef struct {
  conv_entry *e[2]; /* chunks of nb images, and the last one */
  bool temp[2];
  int64_t nb, parts;
  const char *a, *b;   /* user inputs (b: weights in e's layout when b_ready) */
  size_t a_img, b_img; /* bytes per image of a, and of b when it is per image (bwd weights: diff_dst) */
  bool b_ready, b_per_image;
  char *c;
  size_t c_img;      /* bytes per image of c (0: c is per chunk, bwd weights) */
  char **c_part;     /* bwd weights: each part's partial gradient */
  void *bias;        /* forward bias */
  float **bias_part; /* bwd weights: each part's partial bias gradient */
  bool bf16;         /* bfloat16 data (weight and bias gradients float32) */
  size_t es;         /* bytes per element of the data: 2 or 4 */
  pthread_mutex_t mu;
  bool failed;
  char err[256];
} conv_call;

static void run_parts(void *vctx, int64_t lo, int64_t hi) {
  conv_call *k = vctx;
  for (int64_t p = lo; p < hi; p++) {
    const conv_entry *e = k->e[p == k->parts - 1 ? 1 : 0];
    int64_t n0 = p * k->nb;
    const void *b = k->b_per_image ? k->b + (size_t)n0 * k->b_img : k->b;
    bool ready = k->b_ready && !k->b_per_image;
    void *c = k->c_part ? (void *)k->c_part[p] : k->c + (size_t)n0 * k->c_img;
    void *bias = k->bias_part ? (void *)k->bias_part[p] : (void *)k->bias;
    if (run_entry(e, k->a + (size_t)n0 * k->a_img, b, ready, c, bias)) {
      pthread_mutex_lock(&k->mu);
      if (!k->failed) snprintf(k->err, sizeof k->err, "%s", dp_errmsg());
      k->failed = true;
      pthread_mutex_unlock(&k->mu);
    }
  }
}

/* Bytes of one chunk's largest blocked buffer (a reorder of the input or
 * the output) past which the forward and the input gradient split the
 * batch into more chunks than threads: an evaluation batch of 1000 images
 * 28x28 with 32 channels is 100 MB per tensor, and a thread's share of it
 * in the blocked layout would be another 50 MB held beside the user's
 * tensors (the example's peak RSS doubled), where chunks of a few MB are
 * as fast (measured: the reorders run from cache) and reuse one block of
 * the allocator's cache. The weight gradient keeps one chunk per thread
 * (each chunk's partial gradient is summed). */
#define CHUNK_BYTES ((int64_t)4 << 20)

/* A call's geometry, 2-d (g2) or 3-d (g3): images, channels in and out, positions per image in and out. */
typedef struct {
  int64_t n, c, o, in_sp, out_sp;
  const dp_window2d *g2;
  const dp_window3d *g3;
} conv_geo;

static conv_geo geo2(const dp_window2d *g, int64_t o) {
  return (conv_geo){g->n, g->c, o, g->h * g->w, g->oh * g->ow, g, NULL};
}
static conv_geo geo3(const dp_window3d *g, int64_t o) {
  return (conv_geo){g->n, g->c, o, g->d * g->h * g->w, g->od * g->oh * g->ow, NULL, g};
}

static conv_key geo_key(const conv_geo *q, int kind, int64_t n, bool bf16) {
  return q->g3 ? dp_dnnl_conv_key3(kind, n, q->g3, q->o) : dp_dnnl_conv_key(kind, n, q->g2, q->o, bf16);
}

static int64_t chunk_cap(int kind, const conv_geo *q) {
  if (kind == K_BWD_WEIGHTS || kind == K_BWD_WEIGHTS_BIAS) return q->n;
  /* channels padded to the 16 of the blocked layouts */
  int64_t cin = (q->c + 15) / 16 * 16, cout = (q->o + 15) / 16 * 16;
  int64_t in = cin * q->in_sp * 4, out = cout * q->out_sp * 4, per = in > out ? in : out;
  int64_t cap = CHUNK_BYTES / (per > 0 ? per : 1);
  return cap < 1 ? 1 : cap;
}

/* Sets up k's chunks and entries for `kind`; 0 with k->e[0] NULL when
 * oneDNN declines. */
static int plan(conv_call *k, int kind, const conv_geo *q, bool bf16) {
  memset(k, 0, sizeof *k);
  pthread_mutex_init(&k->mu, NULL);
  k->bf16 = bf16, k->es = bf16 ? 2 : 4;
  int threads = dp_sgemm_get_num_threads();
  threads = threads < DP_SG_MAX_THREADS ? threads : DP_SG_MAX_THREADS;
  k->parts = q->n < threads ? q->n : threads;
  k->nb = (q->n + k->parts - 1) / k->parts;
  int64_t cap = chunk_cap(kind, q);
  if (k->nb > cap) k->nb = cap;
  k->parts = (q->n + k->nb - 1) / k->nb;
  int64_t last = q->n - (k->parts - 1) * k->nb;
  conv_key k0 = geo_key(q, kind, k->nb, bf16), k1 = geo_key(q, kind, last, bf16);
  if (dp_dnnl_conv_entry_get(&k0, &k->e[0], &k->temp[0])) return -1;
  if (!k->e[0]) return 0;
  if (last == k->nb) {
    k->e[1] = k->e[0];
    return 0;
  }
  if (dp_dnnl_conv_entry_get(&k1, &k->e[1], &k->temp[1])) return -1;
  if (!k->e[1]) { /* oneDNN took one size and not the other: decline both */
    if (k->temp[0]) dp_dnnl_conv_entry_free(k->e[0]);
    k->e[0] = NULL;
  }
  return 0;
}

static void finish(conv_call *k) {
  if (k->temp[0]) dp_dnnl_conv_entry_free(k->e[0]);
  if (k->temp[1] && k->e[1] != k->e[0]) dp_dnnl_conv_entry_free(k->e[1]);
  pthread_mutex_destroy(&k->mu);
}

static int run_call(conv_call *k) {
  dp_dnnl_count_calls(1);
  dp_dnnl_conv_count_winograd(k->e[0]);
  dp_cpu_parallel_for(k->parts, 1, 1, run_parts, k);
  return k->failed ? dp_error("%s", k->err) : 0;
}

/* The weights in the layout of both entries (which agree for every shape
 * seen; if they did not, each part reorders its own). */
static int prepare_weights(conv_call *k, const void *w, void **buf, size_t *size) {
  *buf = NULL;
  const conv_entry *e = k->e[0];
  if (!e->reorder[1] || !dnnl_memory_desc_equal(&e->md[1], &k->e[1]->md[1])) {
    k->b = w, k->b_ready = false;
    return 0;
  }
  *size = dnnl_memory_desc_get_size(&e->md[1]);
  if (!(*buf = dp_cpu_alloc(*size))) return dp_error("oneDNN: out of memory for weights");
  dnnl_stream_t st = dp_dnnl_thread_stream();
  if (!st) return dp_error("oneDNN: cannot create a stream");
  if (dp_dnnl_exec_reorder(e->reorder[1], &e->user[1], (void *)w, &e->md[1], *buf, st)) return -1;
  k->b = *buf, k->b_ready = true;
  return 0;
}

/* Which convolutions go to oneDNN: everything float32 it implements,
 * except the input gradient of layers with few input channels, where its
 * blocked kernels pad the channels to 16 and lose to col2im (measured:
 * docs/performance.md), and the weight gradient of a single-channel input,
 * where reordering the output gradient into the blocked layout costs more
 * than ddplua's im2col + GEMM does in all (measured, the Fashion-MNIST
 * CNN's conv 1->32 3x3 on 64 images of 28x28, one thread: 2.3 ms against
 * 1.1; with 3 input channels oneDNN is the faster again, 2.8 against 3.8). */
static bool wanted(int kind, const conv_geo *q) {
  if (q->g3) return true; /* a 3-d convolution has no other path here (ops/conv3d.c composes it whole or not) */
  if (kind == K_BWD_DATA) return q->c >= 16;
  if (kind == K_BWD_WEIGHTS || kind == K_BWD_WEIGHTS_BIAS) return q->c > 1;
  return true;
}

/* ---- bfloat16 (autocast): computed in bfloat16 where the CPU has it
 * natively (conv_bf16_native); elsewhere the operands widened to float32
 * (exactly), the float32 convolution, each result rounded once ---- */

static bool is_bf16(const dp_tensor *t) { return t && t->dtype == DP_BF16; }

static dp_tensor *widened(const dp_tensor *t, bool *fail) {
  if (!t || *fail) return NULL;
  dp_tensor *f = dp_empty(DP_F32, t->ndim, t->shape, dp_dev(t));
  if (!f || dp_cpu_copy(f, t)) {
    if (f) dp_release(f);
    *fail = true;
    return NULL;
  }
  return f;
}

/* a float32 tensor of t's shape for an output the primitive writes whole (nothing to widen) */
static dp_tensor *blank(const dp_tensor *t, bool *fail) {
  if (!t || *fail) return NULL;
  dp_tensor *f = dp_empty(DP_F32, t->ndim, t->shape, dp_dev(t));
  if (!f) *fail = true;
  return f;
}

static int narrowed(dp_tensor *dst, dp_tensor *src) {
  if (!dst) return 0;
  int rc = dp_cpu_copy(dst, src);
  return rc;
}

static int conv_run(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const conv_geo *q,
                    bool bf16);
static int conv_backward_run(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                             const dp_tensor *w, const conv_geo *q, bool bf16);

/* bfloat16 convolutions in bfloat16 where the CPU computes it natively
 * (dp_cpu_native_bf16: AMX, AVX512-BF16) and DDPLUA_CONV_BF16 is not 0;
 * elsewhere, or where oneDNN declines the shape, widened to float32. */
static long bf16_conv_calls; /* atomic */
long dp_dnnl_bf16_conv_calls(void) { return __atomic_load_n(&bf16_conv_calls, __ATOMIC_RELAXED); }

/* The CPU and DDPLUA_CONV_BF16, read once: 0 no bfloat16 convolutions (no
 * native bfloat16, or 0), 1 every shape in bfloat16 (1, or AMX), -1 by
 * shape (dp_dnnl_conv2d_bf16_pays). Another value is reported once and
 * read as unset, as DDPLUA_CPU_ISA's. */
static int conv_bf16_mode(void) {
  static int mode = -2; /* atomic; -2: not yet read */
  int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
  if (m != -2) return m;
  const char *e = getenv("DDPLUA_CONV_BF16");
  bool zero = e && strcmp(e, "0") == 0, one = e && strcmp(e, "1") == 0;
  if (e && *e && !zero && !one)
    fprintf(stderr, "ddplua: DDPLUA_CONV_BF16: '%.32s' is not 0 or 1; choosing by shape\n", e);
  m = !dp_cpu_native_bf16() || zero ? 0 : one || strstr(dp_cpu_describe(), "amx_bf16") ? 1 : -1;
  __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
  return m;
}
static bool conv_bf16_native(void) { return conv_bf16_mode() != 0; }

/* Measured on AVX512-BF16 without AMX (Zen 5, docs/performance.md: the
 * fifth 2026-12-06 session, ms forward + backward at batch 64, 2 threads):
 * oneDNN's bfloat16 kernels lose to the float32 path on outputs of under 4
 * positions, where float32 has its own GEMMs for tiny outputs (128 -> 128,
 * 3x3 at 1x1: 0.577 against 0.197; 64 -> 128, 1x1 / 2 at 2x2: 0.109
 * against 0.044), and win or tie from 2x2 outputs up, 1x1 kernels and 1 or
 * 3 input channels included (64 -> 128 1x1 at 16x16: 3.7-3.9 against the
 * float32 path's 5.9-6.0 with its casts; 3 -> 16 3x3 at 32x32: 2.3-2.4
 * against 2.8-3.0). AMX was not measured: there every shape stays
 * bfloat16, as before. */
bool dp_dnnl_conv2d_bf16_pays(const dp_window2d *g) {
  int m = conv_bf16_mode();
  return m >= 0 ? m == 1 : g->oh * g->ow >= 4;
}

int dp_dnnl_conv2d(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window2d *g) {
  conv_geo q = geo2(g, w->shape[0]);
  if (!(is_bf16(y) && is_bf16(x) && is_bf16(w) && (!b || is_bf16(b)))) return conv_run(y, x, w, b, &q, false);
  if (!dp_dnnl_available() || !wanted(b ? K_FWD_BIAS : K_FWD, &q)) return 0;
  if (conv_bf16_native()) {
    int native = conv_run(y, x, w, b, &q, true);
    if (native > 0) __atomic_fetch_add(&bf16_conv_calls, 1, __ATOMIC_RELAXED);
    if (native) return native;
  }
  bool fail = false;
  dp_tensor *y32 = blank(y, &fail), *x32 = widened(x, &fail), *w32 = widened(w, &fail), *b32 = widened(b, &fail);
  int rc = fail ? dp_error("conv2d: out of memory for the float32 operands of a bfloat16 convolution")
                : conv_run(y32, x32, w32, b32, &q, false);
  if (rc > 0 && narrowed(y, y32)) rc = -1;
  dp_tensor *all[4] = {y32, x32, w32, b32};
  for (int i = 0; i < 4; i++)
    if (all[i]) dp_release(all[i]);
  return rc;
}

int dp_dnnl_conv2d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_tensor *w, const dp_window2d *g) {
  conv_geo q = geo2(g, w->shape[0]);
  bool bf =
      is_bf16(gy) && is_bf16(x) && is_bf16(w) && (!gx || is_bf16(gx)) && (!gw || is_bf16(gw)) && (!gb || is_bf16(gb));
  if (!bf) return conv_backward_run(gx, gw, gb, gy, x, w, &q, false);
  if (!dp_dnnl_available() || (gx && !wanted(K_BWD_DATA, &q))) return 0;
  if (conv_bf16_native()) {
    int native = conv_backward_run(gx, gw, gb, gy, x, w, &q, true);
    if (native > 0) __atomic_fetch_add(&bf16_conv_calls, 1, __ATOMIC_RELAXED);
    if (native) return native;
  }
  bool fail = false;
  /* x is read for the weights' gradient only (conv_transpose2d's forward passes its output there as x) */
  dp_tensor *gy32 = widened(gy, &fail), *x32 = gw ? widened(x, &fail) : NULL, *w32 = widened(w, &fail);
  dp_tensor *gx32 = blank(gx, &fail), *gw32 = blank(gw, &fail), *gb32 = blank(gb, &fail);
  int rc = fail ? dp_error("conv2d: out of memory for the float32 operands of a bfloat16 convolution")
                : conv_backward_run(gx32, gw32, gb32, gy32, x32 ? x32 : gx32, w32, &q, false);
  if (rc > 0 && (narrowed(gx, gx32) || narrowed(gw, gw32) || narrowed(gb, gb32))) rc = -1;
  dp_tensor *all[6] = {gy32, x32, w32, gx32, gw32, gb32};
  for (int i = 0; i < 6; i++)
    if (all[i]) dp_release(all[i]);
  return rc;
}

static int conv_run(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const conv_geo *q,
                    bool bf16) {
  dp_dtype dt = bf16 ? DP_BF16 : DP_F32;
  if (!dp_dnnl_available() || x->dtype != dt || w->dtype != dt || y->dtype != dt || (b && b->dtype != dt) || q->n < 1)
    return 0;
  int kind = b ? K_FWD_BIAS : K_FWD;
  if (!wanted(kind, q)) return 0;
  conv_call k;
  int64_t o = q->o;
  if (plan(&k, kind, q, bf16)) return -1;
  if (!k.e[0]) {
    finish(&k);
    return 0;
  }
  void *wbuf = NULL;
  size_t wsize = 0;
  int rc = prepare_weights(&k, dp_data(w), &wbuf, &wsize);
  if (!rc) {
    k.a = dp_data(x), k.a_img = (size_t)(q->c * q->in_sp) * k.es;
    k.c = dp_data(y), k.c_img = (size_t)(o * q->out_sp) * k.es;
    k.bias = b ? dp_data(b) : NULL;
    rc = run_call(&k);
  }
  if (wbuf) dp_cpu_free(wbuf, wsize);
  finish(&k);
  return rc ? -1 : 1;
}

/* k set up for the input gradient (*wbuf: the weights in its layout,
 * freed by the caller) */
static int data_setup(conv_call *k, dp_tensor *gx, const dp_tensor *gy, const dp_tensor *w, const conv_geo *q,
                      void **wbuf, size_t *wsize) {
  int64_t o = q->o;
  int rc = prepare_weights(k, dp_data(w), wbuf, wsize);
  if (!rc) {
    k->a = dp_data(gy), k->a_img = (size_t)(o * q->out_sp) * k->es;
    k->c = dp_data(gx), k->c_img = (size_t)(q->c * q->in_sp) * k->es;
  }
  return rc;
}

/* ---- both backwards of a chunk, its output gradient reordered once ----
 * The input gradient takes the output gradient as its first input, the
 * weight gradient as its second; where both want it in the same blocked
 * layout and chunk the batch alike, one reorder per chunk serves both
 * (measured: two of the six reorders of the CNN's conv 32->64 step), the
 * chunk still in cache for the second primitive. */

static bool share_output_grad(const conv_call *kd, const conv_call *kw) {
  if (kd->parts != kw->parts || kd->nb != kw->nb) return false;
  for (int i = 0; i < 2; i++)
    if (kd->e[i]->reorder[0] && !dnnl_memory_desc_equal(&kd->e[i]->md[0], &kw->e[i]->md[1])) return false;
  return true;
}

static int run_pair_part(const conv_call *kd, const conv_call *kw, int64_t p) {
  bool last = p == kd->parts - 1;
  const conv_entry *ed = kd->e[last ? 1 : 0], *ew = kw->e[last ? 1 : 0];
  int64_t n0 = p * kd->nb;
  const char *gy = kd->a + (size_t)n0 * kd->a_img;
  void *buf = NULL;
  size_t size = 0;
  int rc = 0;
  if (ed->reorder[0]) {
    dnnl_stream_t st = dp_dnnl_thread_stream();
    size = dnnl_memory_desc_get_size(&ed->md[0]);
    if (!st) rc = dp_error("oneDNN: cannot create a stream");
    else if (!(buf = dp_cpu_alloc(size))) rc = dp_error("oneDNN: out of memory (%zu bytes)", size);
    else rc = dp_dnnl_exec_reorder(ed->reorder[0], &ed->user[0], (void *)gy, &ed->md[0], buf, st);
  }
  const void *g = buf ? buf : (const void *)gy;
  if (!rc) rc = run_entry_ready(ed, g, buf != NULL, kd->b, kd->b_ready, kd->c + (size_t)n0 * kd->c_img, NULL);
  if (!rc)
    rc = run_entry_ready(ew, kw->a + (size_t)n0 * kw->a_img, false, g, buf != NULL, kw->c_part[p],
                         kw->bias_part ? kw->bias_part[p] : NULL);
  if (buf) dp_cpu_free(buf, size);
  return rc;
}

typedef struct {
  const conv_call *d;
  conv_call *w; /* failures recorded here */
} conv_pair;

static void run_pair_parts(void *vctx, int64_t lo, int64_t hi) {
  conv_pair *pp = vctx;
  for (int64_t p = lo; p < hi; p++)
    if (run_pair_part(pp->d, pp->w, p)) {
      pthread_mutex_lock(&pp->w->mu);
      if (!pp->w->failed) snprintf(pp->w->err, sizeof pp->w->err, "%s", dp_errmsg());
      pp->w->failed = true;
      pthread_mutex_unlock(&pp->w->mu);
    }
}

/* k's calls, or (with kd set up by data_setup and sharing k's chunks)
 * both backwards together */
static int run_weights(conv_call *k, const conv_call *kd) {
  if (!kd) return run_call(k);
  dp_dnnl_count_calls(2);
  dp_dnnl_conv_count_winograd(kd->e[0]);
  dp_dnnl_conv_count_winograd(k->e[0]);
  conv_pair pp = {kd, k};
  dp_cpu_parallel_for(k->parts, 1, 1, run_pair_parts, &pp);
  return k->failed ? dp_error("%s", k->err) : 0;
}

static int backward_weights(conv_call *k, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const conv_geo *q, const conv_call *kd) {
  int64_t o = q->o;
  int64_t wn = dp_numel(gw), parts = k->parts;
  size_t wbytes = (size_t)wn * 4, bbytes = (size_t)o * 4;
  char *cpart[DP_SG_MAX_THREADS] = {NULL};
  float *bpart[DP_SG_MAX_THREADS] = {NULL};
  int rc = 0;
  /* part 0 writes a float32 result itself; the others (and a bfloat16
   * call's part 0) into float32 buffers summed after */
  int64_t first = k->bf16 ? 0 : 1;
  if (!k->bf16) cpart[0] = dp_data(gw), bpart[0] = gb ? dp_data(gb) : NULL;
  for (int64_t p = first; p < parts && !rc; p++) {
    cpart[p] = dp_cpu_alloc(wbytes), bpart[p] = gb ? dp_cpu_alloc(bbytes) : NULL;
    if (!cpart[p] || (gb && !bpart[p])) rc = dp_error("oneDNN: out of memory for partial weight gradients");
  }
  if (!rc) {
    k->a = dp_data(x), k->a_img = (size_t)(q->c * q->in_sp) * k->es;
    k->b = dp_data(gy), k->b_img = (size_t)(o * q->out_sp) * k->es, k->b_per_image = true;
    k->c_part = cpart;
    k->bias_part = gb ? bpart : NULL;
    rc = run_weights(k, kd);
  }
  const dp_cpu_vec *v = dp_cpu_vec_get();
  float *sum_w = (float *)cpart[0], *sum_b = bpart[0];
  for (int64_t p = 1; p < parts; p++) {
    if (!rc) {
      v->binary(DP_B_ADD, sum_w, sum_w, (const float *)cpart[p], wn);
      if (gb) v->binary(DP_B_ADD, sum_b, sum_b, bpart[p], o);
    }
  }
  if (!rc && k->bf16) { /* one rounding to bfloat16 */
    v->cast(dp_data(gw), DP_BF16, sum_w, DP_F32, wn);
    if (gb) v->cast(dp_data(gb), DP_BF16, sum_b, DP_F32, o);
  }
  for (int64_t p = first; p < parts; p++) {
    if (cpart[p]) dp_cpu_free(cpart[p], wbytes);
    if (bpart[p]) dp_cpu_free(bpart[p], bbytes);
  }
  return rc;
}

static int conv_backward_run(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                             const dp_tensor *w, const conv_geo *q, bool bf16) {
  dp_dtype dt = bf16 ? DP_BF16 : DP_F32;
  if (!dp_dnnl_available() || gy->dtype != dt || x->dtype != dt || w->dtype != dt || q->n < 1) return 0;
  if ((gx && gx->dtype != dt) || (gw && gw->dtype != dt) || (gb && gb->dtype != dt)) return 0;
  if ((gx && !wanted(K_BWD_DATA, q)) || (gw && !wanted(K_BWD_WEIGHTS, q))) return 0;
  /* every primitive first: all or nothing, so the caller never computes
   * half of it a second time */
  conv_call kd, kw;
  int rc = 0;
  bool have_d = false, have_w = false;
  if (gx) rc = plan(&kd, K_BWD_DATA, q, bf16), have_d = true;
  if (!rc && gw) rc = plan(&kw, gb ? K_BWD_WEIGHTS_BIAS : K_BWD_WEIGHTS, q, bf16), have_w = true;
  bool declined = (have_d && !kd.e[0]) || (have_w && !kw.e[0]);
  void *wbuf = NULL;
  size_t wsize = 0;
  if (!rc && !declined && gx && gw && share_output_grad(&kd, &kw)) {
    rc = data_setup(&kd, gx, gy, w, q, &wbuf, &wsize);
    if (!rc) rc = backward_weights(&kw, gw, gb, gy, x, q, &kd);
  } else {
    if (!rc && !declined && gx && !(rc = data_setup(&kd, gx, gy, w, q, &wbuf, &wsize))) rc = run_call(&kd);
    if (!rc && !declined && gw) rc = backward_weights(&kw, gw, gb, gy, x, q, NULL);
  }
  if (wbuf) dp_cpu_free(wbuf, wsize);
  if (have_d) finish(&kd);
  if (have_w) finish(&kw);
  return rc ? -1 : declined ? 0 : 1;
}

/* ---- 3-d convolutions: float32 only (autocast composes them from 2-d ones) ---- */

int dp_dnnl_conv3d(dp_tensor *y, const dp_tensor *x, const dp_tensor *w, const dp_tensor *b, const dp_window3d *g) {
  conv_geo q = geo3(g, w->shape[0]);
  return conv_run(y, x, w, b, &q, false);
}

int dp_dnnl_conv3d_backward(dp_tensor *gx, dp_tensor *gw, dp_tensor *gb, const dp_tensor *gy, const dp_tensor *x,
                            const dp_tensor *w, const dp_window3d *g) {
  conv_geo q = geo3(g, w->shape[0]);
  return conv_backward_run(gx, gw, gb, gy, x, w, &q, false);
}
#endif
