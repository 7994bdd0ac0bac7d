/* GELU of bfloat16 values by table (cpu_kernels.h, dp_cpu_gelu_bf16 and
 * dp_cpu_gelu_bf16_backward).
 *
 * A bfloat16 has 65536 values, so GELU and its derivative at each of them
 * are computed once, by the float32 vector kernels the elementwise path
 * runs on the widened value (the selected ISA's unary and unary_bwd, under
 * the process's denormal setting), and kept: y rounded to bfloat16 as that
 * path rounds it, d = the backward at gy = 1 in float32. A lookup then
 * gives the forward's bits exactly and the backward's as gy * d rounded
 * once (tests/spec/bf16_cpu_kernels_spec.lua checks all 65536 values), with
 * no erf per element: the GPT example's [2048, 512] bfloat16 GELU spent its
 * time in the erf polynomial (~35 vector operations per 16 values) and in
 * the float32 derivative it saved for the backward. A table is made per
 * (kernel set, denormal setting) and never freed (at most six: three ISAs,
 * flush on or off). */
#include <pthread.h>
#include <stdlib.h>

#include "backends/cpu/cpu_fpu.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_vec.h"
#include "core/error.h"

enum { CODES = 65536, BLOCK = 512, SLOTS = 6 };

typedef struct {
  const dp_cpu_vec *v;
  bool flush;
  uint16_t y[CODES];
  float d[CODES];
} gelu_table;

static gelu_table *slots[SLOTS]; /* atomic pointers, filled in order */
static pthread_mutex_t build_mu = PTHREAD_MUTEX_INITIALIZER;

static const gelu_table *find(const dp_cpu_vec *v, bool flush) {
  for (int i = 0; i < SLOTS; i++) {
    gelu_table *t = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
    if (!t) return NULL;
    if (t->v == v && t->flush == flush) return t;
  }
  return NULL;
}

static const gelu_table *table(void) {
  const dp_cpu_vec *v = dp_cpu_vec_get();
  const bool flush = dp_fpu_get_flush_denormal();
  const gelu_table *t = find(v, flush);
  if (t) return t;
  pthread_mutex_lock(&build_mu);
  t = find(v, flush);
  int free_slot = -1;
  for (int i = 0; i < SLOTS && !t && free_slot < 0; i++)
    if (!slots[i]) free_slot = i;
  gelu_table *n = !t && free_slot >= 0 ? malloc(sizeof *n) : NULL;
  if (n) {
    n->v = v, n->flush = flush;
    const dp_unary_args a = {.op = DP_U_GELU};
    float x[BLOCK], y[BLOCK], one[BLOCK];
    uint16_t code[BLOCK];
    for (int i = 0; i < BLOCK; i++) one[i] = 1.0f;
    for (int c0 = 0; c0 < CODES; c0 += BLOCK) {
      for (int i = 0; i < BLOCK; i++) code[i] = (uint16_t)(c0 + i);
      v->cast(x, DP_F32, code, DP_BF16, BLOCK); /* exact */
      v->unary(&a, y, x, BLOCK);
      v->cast(n->y + c0, DP_BF16, y, DP_F32, BLOCK);
      v->unary_bwd(&a, n->d + c0, one, x, NULL, BLOCK);
    }
    __atomic_store_n(&slots[free_slot], n, __ATOMIC_RELEASE);
    t = n;
  }
  pthread_mutex_unlock(&build_mu);
  return t; /* NULL: out of memory or slots: the caller computes */
}

/* The lookups are loops over restrict pointers: compiled so, each
 * iteration group loads its codes before it stores, where the plain loop
 * (a store to y that might be the next code) ran 4x slower on the AMD EPYC
 * of 2026-12-03: [2048, 512] GELU forward 0.69-1.16 ms -> 0.27-0.29. */
static void lookup(uint16_t *restrict y, const uint16_t *restrict x, const uint16_t *restrict ty, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = ty[x[i]];
}

static void scale_by(float *restrict g, const uint16_t *restrict x, const float *restrict d, int64_t n) {
  for (int64_t i = 0; i < n; i++) g[i] *= d[x[i]];
}

bool dp_cpu_gelu_bf16(uint16_t *y, const uint16_t *x, int64_t n) {
  const gelu_table *t = table();
  if (!t) return false;
  DP_ASSERT(y != x); /* a fresh output (cpu_kernels.h) */
  lookup(y, x, t->y, n);
  return true;
}

bool dp_cpu_gelu_bf16_backward(uint16_t *gx, const uint16_t *gy, const uint16_t *x, int64_t n) {
  const gelu_table *t = table();
  if (!t) return false;
  DP_ASSERT(gx != gy && gx != x);
  const dp_cpu_vec *v = dp_cpu_vec_get();
  float g[BLOCK];
  for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {
    int64_t m = n - i0 < BLOCK ? n - i0 : BLOCK;
    v->cast(g, DP_F32, gy + i0, DP_BF16, m);
    scale_by(g, x + i0, t->d, m);
    v->cast(gx + i0, DP_BF16, g, DP_F32, m);
  }
  return true;
}
