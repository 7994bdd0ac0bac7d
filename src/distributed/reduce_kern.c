/* Elementwise reductions for the collectives (see reduce_kern.h). Work goes
 * in blocks that stay in L1 while every source is folded in. */
#include "distributed/reduce_kern.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define BLOCK 2048 /* elements per block: 8-16 KiB of destination */

bool dp_redop_supported(dp_redop op, dp_dtype dt) {
  if (dt == DP_F32 || dt == DP_F64) return true;
  if (dt == DP_I64) return op != DP_RED_AVG;
  return false;
}

/* NaN propagates through max/min as in PyTorch. */
static void fold_f32(float *d, const float *a, const float *b, size_t n, dp_redop op) {
  switch (op) {
  case DP_RED_SUM:
  case DP_RED_AVG:
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    break;
  case DP_RED_PROD:
    for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i];
    break;
  case DP_RED_MAX:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  case DP_RED_MIN:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  }
}

static void fold_f64(double *d, const double *a, const double *b, size_t n, dp_redop op) {
  switch (op) {
  case DP_RED_SUM:
  case DP_RED_AVG:
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    break;
  case DP_RED_PROD:
    for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i];
    break;
  case DP_RED_MAX:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  case DP_RED_MIN:
    for (size_t i = 0; i < n; i++) d[i] = (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i];
    break;
  }
}

/* int64 sums and products wrap like PyTorch's (computed unsigned: no UB). */
static void fold_i64(int64_t *d, const int64_t *a, const int64_t *b, size_t n, dp_redop op) {
  switch (op) {
  case DP_RED_SUM:
  case DP_RED_AVG:
    for (size_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]);
    break;
  case DP_RED_PROD:
    for (size_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)a[i] * (uint64_t)b[i]);
    break;
  case DP_RED_MAX:
    for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i];
    break;
  case DP_RED_MIN:
    for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i];
    break;
  }
}

static void fold(void *d, const void *a, const void *b, size_t n, dp_dtype dt, dp_redop op) {
  switch (dt) {
  case DP_F32: fold_f32(d, a, b, n, op); break;
  case DP_F64: fold_f64(d, a, b, n, op); break;
  case DP_I64: fold_i64(d, a, b, n, op); break;
  default: break; /* callers check dp_redop_supported */
  }
}

void dp_reduce_n(void *dst, const void *const *src, int k, size_t n, dp_dtype dt, dp_redop op) {
  size_t es = dp_dtype_size(dt);
  if (k == 1) {
    if (dst != src[0]) memmove(dst, src[0], n * es);
    return;
  }
  for (size_t i0 = 0; i0 < n; i0 += BLOCK) {
    size_t m = n - i0 < BLOCK ? n - i0 : BLOCK, off = i0 * es;
    char *d = (char *)dst + off;
    fold(d, (const char *)src[0] + off, (const char *)src[1] + off, m, dt, op);
    for (int j = 2; j < k; j++) fold(d, d, (const char *)src[j] + off, m, dt, op);
  }
}

/* x / k; for a power of two k that is exactly x * (1/k), which vectorises
 * at full rate where a division does not (the 2-rank average of DDP). */
void dp_reduce_scale(void *dst, size_t n, dp_dtype dt, int k) {
  bool pow2 = k > 0 && (k & (k - 1)) == 0;
  if (dt == DP_F32) {
    float *d = dst, s = (float)k, r = 1.0f / s;
    if (pow2)
      for (size_t i = 0; i < n; i++) d[i] *= r;
    else
      for (size_t i = 0; i < n; i++) d[i] /= s;
  } else if (dt == DP_F64) {
    double *d = dst, s = (double)k, r = 1.0 / s;
    if (pow2)
      for (size_t i = 0; i < n; i++) d[i] *= r;
    else
      for (size_t i = 0; i < n; i++) d[i] /= s;
  }
}

/* Two ranks' copies averaged (or summed) into both at once: one pass that
 * reads each line of a and b once and writes both, with no staging buffer
 * between the fold and the copies out. The arithmetic is dp_reduce_n's
 * followed by dp_reduce_scale's, in the same order, so the bits are too. */
static void pair_f32(float *restrict a, float *restrict b, size_t n, int div) {
  if (div <= 1) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] = a[i] + b[i];
  } else if ((div & (div - 1)) == 0) {
    float r = 1.0f / (float)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) * r;
  } else {
    float s = (float)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) / s;
  }
}

static void pair_f64(double *restrict a, double *restrict b, size_t n, int div) {
  if (div <= 1) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] = a[i] + b[i];
  } else if ((div & (div - 1)) == 0) {
    double r = 1.0 / (double)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) * r;
  } else {
    double s = (double)div;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (a[i] + b[i]) / s;
  }
}

/* The staged form: mine and a peer's staged copy summed into mine and into
 * my staging slot at once (the result the peers copy out), where a fold
 * into the slot and a copy back would touch the slot's lines twice. */
#define PAIR_TO(T, NAME)                                                                                               \
  static void NAME(T *restrict mine, T *restrict slot, const T *restrict peer, size_t n, int div) {                    \
    if (div <= 1) {                                                                                                    \
      for (size_t i = 0; i < n; i++) mine[i] = slot[i] = mine[i] + peer[i];                                            \
    } else if ((div & (div - 1)) == 0) {                                                                               \
      T r = (T)1 / (T)div;                                                                                             \
      for (size_t i = 0; i < n; i++) mine[i] = slot[i] = (mine[i] + peer[i]) * r;                                      \
    } else {                                                                                                           \
      T s = (T)div;                                                                                                    \
      for (size_t i = 0; i < n; i++) mine[i] = slot[i] = (mine[i] + peer[i]) / s;                                      \
    }                                                                                                                  \
  }
PAIR_TO(float, pair_to_f32)
PAIR_TO(double, pair_to_f64)

/* ---- streamed stores: what a peer reads next, sent to memory ----
 * The same arithmetic with the slot's lines written by non-temporal stores
 * (aligned vectors; the unaligned head and tail with plain ones), then a
 * store fence, since those stores are weakly ordered and a peer reads them
 * after the next step. Why: see dp_stage_pick in reduce_kern.h. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/cpu_vec.h"

#define TARGET_AVX512 __attribute__((target("avx512f")))
#define TARGET_AVX2 __attribute__((target("avx2")))

/* One function per dtype and instruction set: VB bytes per vector, V the
 * vector type, LD/ST/NT/ADD/MUL/DIV/SET1 its intrinsics. */
#define PAIR_TO_NT(TGT, NAME, T, VB, V, LD, ST, NT, ADD, MUL, DIV, SET1)                                               \
  TGT static void NAME(T *restrict mine, T *restrict slot, const T *restrict peer, size_t n, int div) {                \
    const size_t w = VB / sizeof(T);                                                                                   \
    size_t head = ((VB - (uintptr_t)slot % VB) % VB) / sizeof(T);                                                      \
    if ((uintptr_t)slot % sizeof(T) || head > n) head = n;                                                             \
    size_t end = head + (n - head) / w * w;                                                                            \
    bool pow2 = div > 1 && (div & (div - 1)) == 0;                                                                     \
    T r = div > 1 ? (T)1 / (T)div : (T)1, s = (T)div;                                                                  \
    V vr = SET1(r), vs = SET1(s);                                                                                      \
    for (size_t i = head; i < end; i += w) {                                                                           \
      V v = ADD(LD(mine + i), LD(peer + i));                                                                           \
      if (pow2) v = MUL(v, vr);                                                                                        \
      else if (div > 1) v = DIV(v, vs);                                                                                \
      ST(mine + i, v);                                                                                                 \
      NT(slot + i, v);                                                                                                 \
    }                                                                                                                  \
    for (int part = 0; part < 2; part++) { /* the head, then the tail, plainly */                                      \
      size_t lo = part ? end : 0, hi = part ? n : head;                                                                \
      for (size_t i = lo; i < hi; i++) {                                                                               \
        T v = mine[i] + peer[i];                                                                                       \
        if (pow2) v *= r;                                                                                              \
        else if (div > 1) v /= s;                                                                                      \
        mine[i] = slot[i] = v;                                                                                         \
      }                                                                                                                \
    }                                                                                                                  \
    _mm_sfence();                                                                                                      \
  }
PAIR_TO_NT(TARGET_AVX512, pair_to_nt_f32_512, float, 64, __m512, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_stream_ps,
           _mm512_add_ps, _mm512_mul_ps, _mm512_div_ps, _mm512_set1_ps)
PAIR_TO_NT(TARGET_AVX512, pair_to_nt_f64_512, double, 64, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_stream_pd,
           _mm512_add_pd, _mm512_mul_pd, _mm512_div_pd, _mm512_set1_pd)
PAIR_TO_NT(TARGET_AVX2, pair_to_nt_f32_256, float, 32, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_stream_ps,
           _mm256_add_ps, _mm256_mul_ps, _mm256_div_ps, _mm256_set1_ps)
PAIR_TO_NT(TARGET_AVX2, pair_to_nt_f64_256, double, 32, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_stream_pd,
           _mm256_add_pd, _mm256_mul_pd, _mm256_div_pd, _mm256_set1_pd)

static int nt_bytes(void) { /* vector bytes of the instruction set in use, 0 without one */
  int w = dp_cpu_vec_get()->width;
  return w >= 16 ? 64 : w >= 8 ? 32 : 0;
}

static bool pair_to_streamed(void *mine, void *slot, const void *peer, size_t n, dp_dtype dt, int div) {
  int vb = nt_bytes();
  if (!vb) return false;
  if (dt == DP_F32) (vb == 64 ? pair_to_nt_f32_512 : pair_to_nt_f32_256)(mine, slot, peer, n, div);
  else (vb == 64 ? pair_to_nt_f64_512 : pair_to_nt_f64_256)(mine, slot, peer, n, div);
  return true;
}
#else
static bool pair_to_streamed(void *mine, void *slot, const void *peer, size_t n, dp_dtype dt, int div) {
  (void)mine, (void)slot, (void)peer, (void)n, (void)dt, (void)div;
  return false;
}
#endif

bool dp_reduce_pair_to(void *mine, void *slot, const void *peer, size_t n, dp_dtype dt, dp_redop op, int avg_div,
                       dp_stage_kind kind) {
  if (op != DP_RED_SUM && op != DP_RED_AVG) return false;
  if (dt != DP_F32 && dt != DP_F64) return false;
  if (kind == DP_STAGE_STREAMED && pair_to_streamed(mine, slot, peer, n, dt, avg_div)) return true;
  if (dt == DP_F32) pair_to_f32(mine, slot, peer, n, avg_div);
  else if (dt == DP_F64) pair_to_f64(mine, slot, peer, n, avg_div);
  else return false;
  return true;
}

bool dp_reduce_pair_inplace(void *a, void *b, size_t n, dp_dtype dt, dp_redop op, int avg_div) {
  if (op != DP_RED_SUM && op != DP_RED_AVG) return false;
  if (dt == DP_F32) pair_f32(a, b, n, avg_div);
  else if (dt == DP_F64) pair_f64(a, b, n, avg_div);
  else return false;
  return true;
}

/* ---- which kind of stores a group's staged collectives use ---- */
int dp_stage_init(dp_stage_stats *st) {
  memset(st, 0, sizeof *st);
  st->fixed = -1;
  const char *v = getenv("DDPLUA_SHM_STAGE");
  if (!v || !*v || strcmp(v, "auto") == 0) return 0;
  if (strcmp(v, "plain") == 0) st->fixed = DP_STAGE_PLAIN;
  else if (strcmp(v, "streamed") == 0) st->fixed = DP_STAGE_STREAMED;
  else return dp_error("DDPLUA_SHM_STAGE is '%.40s'; expected plain, streamed or auto", v);
  return 0;
}

static int stage_class(size_t nbytes) { /* < 256 KiB, < 1 MiB, < 4 MiB, ... */
  int c = 0;
  for (size_t b = nbytes >> 18; b > 0 && c < DP_STAGE_CLASSES - 1; b >>= 2) c++;
  return c;
}

dp_stage_kind dp_stage_pick(dp_stage_stats *st, size_t nbytes) {
  if (st->fixed >= 0) return (dp_stage_kind)st->fixed;
  if (nbytes < DP_STAGE_MIN) return DP_STAGE_PLAIN;
  int c = stage_class(nbytes);
  const double *m = st->ns_per_byte[c];
  if (m[DP_STAGE_PLAIN] == 0) return DP_STAGE_PLAIN; /* each kind once first */
  if (m[DP_STAGE_STREAMED] == 0) return DP_STAGE_STREAMED;
  dp_stage_kind best = m[DP_STAGE_STREAMED] < m[DP_STAGE_PLAIN] ? DP_STAGE_STREAMED : DP_STAGE_PLAIN;
  if (++st->ops[c] % DP_STAGE_EXPLORE == 0) return best == DP_STAGE_PLAIN ? DP_STAGE_STREAMED : DP_STAGE_PLAIN;
  return best;
}

void dp_stage_learn(dp_stage_stats *st, size_t nbytes, dp_stage_kind kind, double seconds) {
  if (st->fixed >= 0 || nbytes < DP_STAGE_MIN || !(seconds > 0)) return;
  double x = seconds * 1e9 / (double)nbytes, *m = &st->ns_per_byte[stage_class(nbytes)][kind];
  *m = *m == 0 ? x : 0.75 * *m + 0.25 * x; /* a few ops: the state changes within a minute */
}
