/* CPU copies of permuted views into contiguous tensors: the copy kernel's
 * path for a source whose innermost dim is not its unit-stride one (a
 * transposed matrix, PixelShuffle's [N, C, r, r, H, W] -> [N, C, H, r, W, r],
 * a channels-last view made contiguous).
 *
 * After size-1 dims are dropped and dims both tensors step through as one
 * are merged, the source steps 1 along some dim a and s_b along the last
 * dim b; the destination is contiguous, so along b it steps 1 and along a
 * some d_a. For each index of the other dims the copy is the 2-D transpose
 * dst[i * d_a + j] = src[i + j * s_b] of an [n_a, n_b] block, done in
 * strips of STRIP rows of a in tiles of 16 x 16: each tile reads 16 source
 * lines whole into a local block and writes 16 destination lines whole from
 * it, so every cache line is touched once per tile. (A direct loop over the
 * tile touches one element per line per step: with a power-of-two row pitch
 * those lines share a cache set and evict each other, 2048 x 2048 ran at a
 * tenth of memcpy's speed. The row-at-a-time iteration of the copy kernel
 * does the same, and worse where the last dim is short: PixelShuffle's r = 2
 * made it a call per two elements.) With AVX-512, 32-bit elements go
 * through the attention code's 16 x 16 register transpose instead (bit
 * exact: loads, shuffles and stores only): 2048 x 2048 float32 took 5.2-6.6
 * ms against the local block's 10.3-10.6 on an AMD EPYC core (bench/nn_ops.lua:
 * 2.7-4.5 ms, PyTorch 1.13 7.3-7.9 in the same run). There a strip is 64
 * destination rows: each 16-row band of the source is read 256 bytes a row
 * instead of 64, so the source's pages are walked a quarter as often (a
 * 2048-pitch column walk touches a page per row, and on a VM every TLB miss
 * is a nested page walk): on a Zen 5 core 2.39-3.36 ms -> 1.71-2.15 with
 * 16-row strips before and after, alternated three times; strips of 32 /
 * 128 / 256 rows measured 2.6-4.9 / 2.3-2.6 / 2.7-2.8. Blocks with a side
 * under 8 (PixelShuffle's r) are copied element by element in the order
 * that keeps the long side's lines whole. */
#include <string.h>

#include "backends/cpu/cpu_attn_gemm.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/cpu_vec.h"

enum { TB = 16, STRIP = 64, SHORT = 8, SHORT_ROW_BYTES = 1024 };

typedef struct {
  int m, a;                  /* merged dims; the one the source steps 1 along (the last is b) */
  int64_t shape[DP_MAXDIM];  /* merged sizes */
  int64_t sst[DP_MAXDIM];    /* the source's element strides */
  int64_t dst_st[DP_MAXDIM]; /* the destination's (contiguous) */
  int n_od, od[DP_MAXDIM];   /* the other dims, outermost first */
  int64_t strips;            /* strips of STRIP along a per outer index */
  size_t es;
  char *o;
  const char *x;
} perm_plan;

#define TRANSPOSE_TILE(T)                                                                                              \
  static void transpose_tile_##T(T *o, const T *x, int64_t d_a, int64_t s_b, int64_t ni, int64_t nj) {                 \
    T blk[TB][TB];                                                                                                     \
    for (int64_t j = 0; j < nj; j++)                                                                                   \
      for (int64_t i = 0; i < ni; i++) blk[j][i] = x[i + j * s_b];                                                     \
    for (int64_t i = 0; i < ni; i++)                                                                                   \
      for (int64_t j = 0; j < nj; j++) o[i * d_a + j] = blk[j][i];                                                     \
  }
TRANSPOSE_TILE(uint32_t)
TRANSPOSE_TILE(uint64_t)
TRANSPOSE_TILE(uint16_t)
#undef TRANSPOSE_TILE

/* a block with a short side, element by element (a 16 x 16 register transpose would be mostly masked lanes):
 * n_b < SHORT source lines interleaved into ni destination runs of n_b (the loop over b outside), or ni < SHORT
 * destination lines each gathered from the source at stride s_b (the loop over a outside) */
#define SHORT_SIDE(T)                                                                                                  \
  static void short_side_##T(T *o, const T *x, int64_t d_a, int64_t s_b, int64_t ni, int64_t nb) {                     \
    if (nb < SHORT)                                                                                                    \
      for (int64_t j = 0; j < nb; j++)                                                                                 \
        for (int64_t i = 0; i < ni; i++) o[i * d_a + j] = x[i + j * s_b];                                              \
    else                                                                                                               \
      for (int64_t i = 0; i < ni; i++)                                                                                 \
        for (int64_t j = 0; j < nb; j++) o[i * d_a + j] = x[i + j * s_b];                                              \
  }
SHORT_SIDE(uint32_t)
SHORT_SIDE(uint64_t)
SHORT_SIDE(uint16_t)
#undef SHORT_SIDE

/* one strip: rows [i0, i0 + ni) of a, all of b, at source x and destination o (already offset) */
static void strip(const perm_plan *p, char *o, const char *x, int64_t ni) {
  int64_t nb = p->shape[p->m - 1], d_a = p->dst_st[p->a], s_b = p->sst[p->m - 1];
  size_t es = p->es;
  if (nb < SHORT || ni < SHORT) {
    if (es == 4) short_side_uint32_t((uint32_t *)(void *)o, (const uint32_t *)(const void *)x, d_a, s_b, ni, nb);
    else if (es == 8) short_side_uint64_t((uint64_t *)(void *)o, (const uint64_t *)(const void *)x, d_a, s_b, ni, nb);
    else short_side_uint16_t((uint16_t *)(void *)o, (const uint16_t *)(const void *)x, d_a, s_b, ni, nb);
    return;
  }
  if (es == 4 && dp_cpu_vec_get()->width == 16) { /* the AVX-512 table: a register transpose per 16 x 16 tile */
    dp_attn_transpose_avx512((const float *)(const void *)x, s_b, nb, ni, (float *)(void *)o, d_a);
    return;
  }
  for (int64_t i0 = 0; i0 < ni; i0 += TB)
    for (int64_t j0 = 0; j0 < nb; j0 += TB) {
      int64_t ti = i0 + TB < ni ? TB : ni - i0, tj = j0 + TB < nb ? TB : nb - j0;
      char *ot = o + (size_t)(i0 * d_a + j0) * es;
      const char *xt = x + (size_t)(i0 + j0 * s_b) * es;
      if (es == 4)
        transpose_tile_uint32_t((uint32_t *)(void *)ot, (const uint32_t *)(const void *)xt, d_a, s_b, ti, tj);
      else if (es == 8)
        transpose_tile_uint64_t((uint64_t *)(void *)ot, (const uint64_t *)(const void *)xt, d_a, s_b, ti, tj);
      else transpose_tile_uint16_t((uint16_t *)(void *)ot, (const uint16_t *)(const void *)xt, d_a, s_b, ti, tj);
    }
}

/* items [lo, hi): item = outer index * strips + strip */
static void run_items(void *ctx, int64_t lo, int64_t hi) {
  const perm_plan *p = ctx;
  int64_t na = p->shape[p->a];
  for (int64_t it = lo; it < hi; it++) {
    int64_t outer = it / p->strips, i0 = it % p->strips * STRIP;
    int64_t so = i0, dof = i0 * p->dst_st[p->a];
    for (int k = p->n_od - 1; k >= 0; k--) {
      int d = p->od[k];
      int64_t idx = outer % p->shape[d];
      outer /= p->shape[d];
      so += idx * p->sst[d];
      dof += idx * p->dst_st[d];
    }
    strip(p, p->o + (size_t)dof * p->es, p->x + (ptrdiff_t)so * (ptrdiff_t)p->es, na - i0 < STRIP ? na - i0 : STRIP);
  }
}

/* Rows the permutation keeps whole (the last dim steps 1 in both: the attention heads' [B, H, T, D] -> [B, T, H, D]
 * made contiguous) and short: the destination's rows [lo, hi) in order, the source's row found by an odometer over
 * the merged dims that steps by one add a row, each row one memcpy. The copy kernel's row loop spends more on the
 * iterator than on the copy for such rows: on one Zen 5 core (bench/permute_copy.lua) GPT's [16, 4, 128, 32] and
 * [16, 128, 4, 32] took 0.087-0.090 ms that way, 0.039-0.054 this way (PyTorch 0.036-0.076). The rows are
 * copied by glibc's memcpy, not inline: 64-byte vector moves inline, four loads before four stores or not, took
 * 1.8-2.0 ms for [64, 128, 8, 64]'s 256-byte rows 2 KB apart in memory, memcpy 1.2-1.4. */
static void run_short_rows(void *ctx, int64_t lo, int64_t hi) {
  const perm_plan *p = ctx;
  const int last = p->m - 1;
  const size_t rb = (size_t)p->shape[last] * p->es;
  int64_t idx[DP_MAXDIM] = {0}, so = 0, r = lo;
  for (int d = last - 1; d >= 0; d--) {
    idx[d] = r % p->shape[d];
    r /= p->shape[d];
    so += idx[d] * p->sst[d];
  }
  char *o = p->o + (size_t)lo * rb;
  for (int64_t row = lo; row < hi; row++, o += rb) {
    memcpy(o, p->x + (ptrdiff_t)so * (ptrdiff_t)p->es, rb);
    for (int d = last - 1; d >= 0; d--) { /* the next row: carry through the dims that wrap */
      so += p->sst[d];
      if (++idx[d] < p->shape[d]) break;
      so -= p->sst[d] * p->shape[d];
      idx[d] = 0;
    }
  }
}

bool dp_cpu_copy_permuted(dp_tensor *dst, const dp_tensor *src) {
  size_t es = dp_elsize(dst);
  if (dst->dtype != src->dtype || (es != 2 && es != 4 && es != 8) || !dp_is_contiguous(dst) || dp_numel(dst) < 256)
    return false;
  perm_plan p = {.es = es, .o = dp_data(dst), .x = dp_data(src), .a = -1};
  /* drop size-1 dims, merge a dim into the one before when both tensors step through it as one */
  int m = 0;
  for (int d = 0; d < dst->ndim; d++) {
    if (dst->shape[d] == 1) continue;
    if (m > 0 && p.sst[m - 1] == src->stride[d] * dst->shape[d]) {
      p.shape[m - 1] *= dst->shape[d];
      p.sst[m - 1] = src->stride[d];
      continue;
    }
    p.shape[m] = dst->shape[d], p.sst[m] = src->stride[d];
    m++;
  }
  if (m < 2 || p.sst[m - 1] == 0) return false;
  p.m = m;
  int64_t step = 1;
  for (int d = m - 1; d >= 0; d--) p.dst_st[d] = step, step *= p.shape[d];
  if (p.sst[m - 1] == 1) {
    if ((size_t)p.shape[m - 1] * es > SHORT_ROW_BYTES) return false; /* long rows: the row loop's memcpy */
    dp_cpu_parallel_for(dp_numel(dst) / p.shape[m - 1], DP_GRAIN_MEMORY / p.shape[m - 1] + 1, 1, run_short_rows, &p);
    return true;
  }
  for (int d = m - 2; d >= 0; d--)
    if (p.sst[d] == 1) {
      p.a = d;
      break;
    }
  if (p.a < 0) return false;
  int64_t na = p.shape[p.a], nb = p.shape[m - 1];
  if (na * nb < 64) return false; /* blocks too small to beat the row loop */
  for (int d = 0; d < m - 1; d++)
    if (d != p.a) p.od[p.n_od++] = d;
  p.strips = (na + STRIP - 1) / STRIP;
  int64_t items = dp_numel(dst) / (na * nb) * p.strips, per_item = (na < STRIP ? na : STRIP) * nb;
  dp_cpu_parallel_for(items, DP_GRAIN_MEMORY / per_item + 1, 1, run_items, &p);
  return true;
}
