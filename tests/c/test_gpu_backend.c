/* The CUDA plugin below the Lua layer: caching allocator reuse and stats,
 * host<->device copies across staging-chunk boundaries, casts bit-identical
 * to the CPU's, Philox numbers and aranges identical to the CPU's for any
 * bounds and start, row kernels past the capped grid, cuBLAS GEMMs in every
 * dtype and transpose against a float64 CPU reference, reductions on the
 * split paths, deferred device errors (index / class out of range) and
 * gradient unscaling. Exits 77 (skipped) when no GPU is visible, unless
 * DDPLUA_REQUIRE_GPU=1 makes that a failure. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/ops.h"
#include "test_util.h"

static const dp_backend *cuda;
static const dp_device GPU = {DP_CUDA, 0};

static dp_tensor *dev(dp_tensor *t, dp_device d) {
  dp_tensor *r = dp_to(t, t->dtype, d);
  if (!r) fprintf(stderr, "move failed: %s\n", dp_errmsg());
  return r;
}

/* max |a - b| / (1 + |b|) over two tensors of one shape (any devices) */
static double rel_diff(dp_tensor *a, dp_tensor *b) {
  dp_tensor *x = dp_to(a, DP_F64, dp_cpu()), *y = dp_to(b, DP_F64, dp_cpu());
  dp_tensor *xc = dp_contiguous(x), *yc = dp_contiguous(y);
  const double *p = dp_data(xc), *q = dp_data(yc);
  double worst = 0;
  for (int64_t i = 0; i < dp_numel(xc); i++) {
    double d = fabs(p[i] - q[i]) / (1 + fabs(q[i]));
    if (!(d <= worst)) worst = d; /* NaN makes it NaN */
  }
  dp_release(x), dp_release(y), dp_release(xc), dp_release(yc);
  return worst;
}

static bool bit_equal(dp_tensor *a, dp_tensor *b) {
  dp_tensor *x = dp_to(a, a->dtype, dp_cpu()), *y = dp_to(b, b->dtype, dp_cpu());
  dp_tensor *xc = dp_contiguous(x), *yc = dp_contiguous(y);
  bool eq = xc->dtype == yc->dtype && dp_numel(xc) == dp_numel(yc) &&
            memcmp(dp_data(xc), dp_data(yc), (size_t)dp_numel(xc) * dp_elsize(xc)) == 0;
  dp_release(x), dp_release(y), dp_release(xc), dp_release(yc);
  return eq;
}

static void test_allocator(void) {
  dp_device_mem_stats s0, s1;
  CHECK(cuda->memory_stats(0, &s0) == 0);
  void *p1 = cuda->alloc(0, 1000);
  CHECK(p1 != NULL);
  cuda->free(0, p1, 1000);
  void *p2 = cuda->alloc(0, 900); /* same 1 KiB class: the cached block comes back */
  CHECK(p2 == p1);
  CHECK(cuda->memory_stats(0, &s1) == 0);
  CHECK(s1.cache_hits >= s0.cache_hits + 1);
  CHECK(s1.live_bytes == s0.live_bytes + 1024);
  cuda->free(0, p2, 900);
  CHECK(cuda->empty_cache() == 0);
  CHECK(cuda->memory_stats(0, &s1) == 0);
  CHECK(s1.cached_bytes == 0);
  CHECK(s1.device_total > 0 && s1.device_free > 0 && s1.device_free <= s1.device_total);
  /* an impossible request is an error with numbers, not a crash */
  CHECK(cuda->alloc(0, (size_t)1 << 46) == NULL);
  CHECK(strstr(dp_errmsg(), "CUDA out of memory: tried to allocate") != NULL);
}

static void test_copies(void) {
  /* sizes around the 4 MiB staging chunks */
  int64_t sizes[] = {0, 1, 7, 1 << 20, (4 << 20) / 4, (9 << 20) / 4 + 3};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    dp_tensor *h = dp_empty(DP_F32, 1, &sizes[k], dp_cpu());
    for (int64_t i = 0; i < sizes[k]; i++) ((float *)dp_data(h))[i] = (float)i * 0.5f - 3.f;
    dp_tensor *g = dev(h, GPU), *back = g ? dev(g, dp_cpu()) : NULL;
    CHECK(back && bit_equal(h, back));
    dp_release(h), dp_release(g), dp_release(back);
  }
  /* an odd-sized uint8 tensor and a strided (transposed) device copy */
  int64_t sh[2] = {37, 53};
  dp_manual_seed(11);
  dp_tensor *r = dp_rand(DP_F32, 2, sh, dp_cpu());
  dp_tensor *scaled = dp_binary_scalar(DP_B_MUL, r, 300.0, false);
  dp_tensor *u8 = dp_to(scaled, DP_U8, dp_cpu()); /* 0..299 wrapped: every byte value */
  dp_tensor *g8 = dev(u8, GPU);
  CHECK(g8 && bit_equal(u8, g8));
  dp_tensor *gr = dev(r, GPU);
  dp_tensor *t_cpu = dp_transpose(r, 0, 1), *t_gpu = dp_transpose(gr, 0, 1);
  dp_tensor *c_cpu = dp_contiguous(t_cpu), *c_gpu = dp_contiguous(t_gpu);
  CHECK(bit_equal(c_cpu, c_gpu));
  /* casts on the device round exactly like the CPU's */
  dp_tensor *sg = dev(scaled, GPU);
  dp_dtype casts[] = {DP_BF16, DP_F16, DP_F64, DP_I64, DP_U8};
  for (size_t k = 0; k < 5; k++) {
    dp_tensor *a = dp_to(scaled, casts[k], dp_cpu()), *b = dp_to(sg, casts[k], GPU);
    CHECK(a && b && bit_equal(a, b));
    dp_release(a), dp_release(b);
  }
  dp_release(r), dp_release(u8), dp_release(g8), dp_release(gr), dp_release(t_cpu), dp_release(t_gpu);
  dp_release(c_cpu), dp_release(c_gpu), dp_release(scaled), dp_release(sg);
}

static void test_random(void) {
  int64_t n = 100003;
  dp_manual_seed(7);
  dp_tensor *a = dp_rand(DP_F32, 1, &n, dp_cpu()), *an = dp_randn(DP_F64, 1, &n, dp_cpu());
  dp_manual_seed(7);
  dp_tensor *b = dp_rand(DP_F32, 1, &n, GPU), *bn = dp_randn(DP_F64, 1, &n, GPU);
  CHECK(bit_equal(a, b)); /* uniform float32: the same bits */
  /* normals go through log/cos, whose last bit may differ between libm and CUDA */
  CHECK(rel_diff(bn, an) < 1e-13);
  dp_release(a), dp_release(b), dp_release(an), dp_release(bn);
  /* general bounds and a non-zero arange start: a + (b - a) * u and
   * start + i * step must round twice on the GPU too (no fused multiply-add),
   * or the last bit differs from the CPU's */
  const dp_backend *cpu = dp_backend_require(DP_CPU);
  dp_dtype dts[2] = {DP_F32, DP_F64};
  for (int d = 0; d < 2; d++) {
    dp_tensor *c = dp_empty(dts[d], 1, &n, dp_cpu()), *g = dp_empty(dts[d], 1, &n, GPU);
    CHECK(cpu->rand(c, DP_RAND_UNIFORM, 42, 1000, -3.7, 11.3) == 0);
    CHECK(cuda->rand(g, DP_RAND_UNIFORM, 42, 1000, -3.7, 11.3) == 0);
    if (!bit_equal(c, g)) fprintf(stderr, "uniform(-3.7, 11.3) %s differs from the CPU's\n", dp_dtype_name(dts[d]));
    CHECK(bit_equal(c, g));
    CHECK(cpu->rand(c, DP_RAND_NORMAL, 42, 7, 2.5, 0.3) == 0 && cuda->rand(g, DP_RAND_NORMAL, 42, 7, 2.5, 0.3) == 0);
    CHECK(rel_diff(g, c) < (dts[d] == DP_F64 ? 1e-13 : 1e-6));
    dp_release(c), dp_release(g);
    dp_tensor *ac = dp_arange(0.1, 20000.0, 0.37, dts[d], dp_cpu()), *ag = dp_arange(0.1, 20000.0, 0.37, dts[d], GPU);
    if (!bit_equal(ac, ag))
      fprintf(stderr, "arange(0.1, 20000, 0.37) %s differs from the CPU's\n", dp_dtype_name(dts[d]));
    CHECK(ac && ag && bit_equal(ac, ag));
    dp_release(ac), dp_release(ag);
  }
}

/* Kernels that give each block one item (a row, a channel split) launch at
 * most DP_CU_MAX_GRID blocks and loop over the rest: item counts past the
 * cap give the CPU's results (small rows, so memcheck stays quick). */
static void test_grid_loops(void) {
  dp_manual_seed(13);
  int64_t wide[2] = {65535 + 9, 3};       /* reduction rows: a block each */
  int64_t narrow[2] = {65535 * 8 + 9, 3}; /* softmax rows: a warp each, 8 per block */
  dp_tensor *x = dp_randn(DP_F32, 2, wide, dp_cpu()), *gx = dev(x, GPU);
  int d1[1] = {1};
  dp_tensor *s_cpu = dp_sum(x, 1, d1, false), *s_gpu = dp_sum(gx, 1, d1, false);
  CHECK(s_cpu && s_gpu && rel_diff(s_gpu, s_cpu) < 1e-6);
  dp_tensor *m_cpu = dp_argmax(x, 1, false, 1), *m_gpu = dp_argmax(gx, 1, false, 1);
  CHECK(m_cpu && m_gpu && bit_equal(m_cpu, m_gpu));
  dp_tensor *y = dp_randn(DP_F32, 2, narrow, dp_cpu()), *gy = dev(y, GPU);
  dp_tensor *p_cpu = dp_softmax(y, 1), *p_gpu = dp_softmax(gy, 1);
  CHECK(p_cpu && p_gpu && rel_diff(p_gpu, p_cpu) < 1e-6);
  dp_tensor *l_cpu = dp_layer_norm(y, 1, NULL, NULL, 1e-5), *l_gpu = dp_layer_norm(gy, 1, NULL, NULL, 1e-5);
  CHECK(l_cpu && l_gpu && rel_diff(l_gpu, l_cpu) < 1e-4);
  dp_release(x), dp_release(gx), dp_release(s_cpu), dp_release(s_gpu), dp_release(m_cpu), dp_release(m_gpu);
  dp_release(y), dp_release(gy), dp_release(p_cpu), dp_release(p_gpu), dp_release(l_cpu), dp_release(l_gpu);
}

/* C = op(A) op(B) on the GPU vs float64 on the CPU (inputs rounded to the
 * dtype first), through dp_matmul with transposed views. */
static void test_gemm(void) {
  dp_dtype dts[] = {DP_F32, DP_F64, DP_BF16, DP_F16};
  double tol[] = {1e-5, 1e-12, 2e-2, 4e-3};
  int64_t B = 3, M = 33, N = 17, K = 65;
  dp_manual_seed(5);
  for (int tf32 = 0; tf32 < 2; tf32++) {
    CHECK(cuda->set_option("tf32", tf32) == 0);
    for (size_t d = 0; d < 4; d++) {
      if (tf32 && dts[d] != DP_F32) continue;
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          int64_t sa[3] = {B, ta ? K : M, ta ? M : K}, sb[3] = {B, tb ? N : K, tb ? K : N};
          dp_tensor *a0 = dp_randn(DP_F32, 3, sa, dp_cpu()), *b0 = dp_randn(DP_F32, 3, sb, dp_cpu());
          dp_tensor *a = dp_to(a0, dts[d], dp_cpu()), *b = dp_to(b0, dts[d], dp_cpu());
          dp_tensor *a64 = dp_to(a, DP_F64, dp_cpu()), *b64 = dp_to(b, DP_F64, dp_cpu());
          dp_tensor *ga = dev(a, GPU), *gb = dev(b, GPU);
          dp_tensor *va = ta ? dp_transpose(ga, 1, 2) : (dp_retain(ga), ga);
          dp_tensor *vb = tb ? dp_transpose(gb, 1, 2) : (dp_retain(gb), gb);
          dp_tensor *ra = ta ? dp_transpose(a64, 1, 2) : (dp_retain(a64), a64);
          dp_tensor *rb = tb ? dp_transpose(b64, 1, 2) : (dp_retain(b64), b64);
          dp_tensor *c = dp_matmul(va, vb), *ref = dp_matmul(ra, rb);
          double t = tf32 ? 2e-2 : tol[d];
          CHECK(c && ref && c->dtype == dts[d]);
          if (c && ref) {
            double e = rel_diff(c, ref);
            if (!(e < t))
              fprintf(stderr, "gemm %s ta=%d tb=%d tf32=%d: rel diff %g\n", dp_dtype_name(dts[d]), ta, tb, tf32, e);
            CHECK(e < t);
          }
          dp_release(a0), dp_release(b0), dp_release(a), dp_release(b), dp_release(a64), dp_release(b64);
          dp_release(ga), dp_release(gb), dp_release(va), dp_release(vb), dp_release(ra), dp_release(rb);
          dp_release(c), dp_release(ref);
        }
    }
  }
  CHECK(cuda->set_option("tf32", 0) == 0);
  /* k == 0: the product is zeros */
  int64_t s1[2] = {4, 0}, s2[2] = {0, 5};
  dp_tensor *a = dp_empty(DP_F32, 2, s1, GPU), *b = dp_empty(DP_F32, 2, s2, GPU);
  dp_tensor *c = dp_matmul(a, b);
  int64_t s3[2] = {4, 5};
  dp_tensor *z = dp_zeros(DP_F32, 2, s3, dp_cpu());
  CHECK(c && bit_equal(c, z));
  dp_release(a), dp_release(b), dp_release(c), dp_release(z);
  /* integer matmul is refused with the dtype named */
  dp_gemm_args g = {.dtype = DP_I64, .m = 1, .n = 1, .k = 1, .batch = 1};
  CHECK(cuda->gemm(&g) != 0 && strstr(dp_errmsg(), "int64") != NULL);
}

static void test_reductions(void) {
  dp_device_mem_stats before, after;
  CHECK(cuda->memory_stats(0, &before) == 0);
  dp_manual_seed(9);
  int64_t big[2] = {2, 1 << 20}, cols[3] = {4, 50000, 3};
  dp_tensor *x = dp_randn(DP_F32, 2, big, dp_cpu()), *y = dp_randn(DP_F64, 3, cols, dp_cpu());
  dp_tensor *gx = dev(x, GPU), *gy = dev(y, GPU);
  int d1[1] = {1};
  dp_tensor *s_cpu = dp_sum(x, 1, d1, false), *s_gpu = dp_sum(gx, 1, d1, false); /* rows, split across blocks */
  CHECK(rel_diff(s_gpu, s_cpu) < 1e-6);
  dp_tensor *m_cpu = dp_mean(y, 1, d1, false), *m_gpu = dp_mean(gy, 1, d1, false); /* columns, split */
  CHECK(rel_diff(m_gpu, m_cpu) < 1e-12);
  dp_tensor *a_cpu = dp_argmax(y, 1, false, 1), *a_gpu = dp_argmax(gy, 1, false, 1);
  CHECK(bit_equal(a_cpu, a_gpu));
  /* first occurrence and NaN, as on the CPU */
  int64_t n5 = 6;
  dp_tensor *v = dp_empty(DP_F32, 1, &n5, dp_cpu());
  float vals[6] = {0.f, 5.f, 5.f, NAN, NAN, 1.f};
  memcpy(dp_data(v), vals, sizeof vals);
  dp_tensor *gv = dev(v, GPU);
  dp_tensor *ac = dp_argmax(v, 0, false, 0), *ag = dp_argmax(gv, 0, false, 0);
  CHECK(bit_equal(ac, ag));
  int64_t pos = -1;
  CHECK(dp_item_i64(ag, &pos) == 0 && pos == 3);
  dp_release(x), dp_release(y), dp_release(gx), dp_release(gy), dp_release(s_cpu), dp_release(s_gpu);
  dp_release(m_cpu), dp_release(m_gpu), dp_release(a_cpu), dp_release(a_gpu), dp_release(v), dp_release(gv);
  dp_release(ac), dp_release(ag);
  CHECK(cuda->memory_stats(0, &after) == 0);
  CHECK(after.live_bytes == before.live_bytes); /* scratch buffers went back */
}

static void test_deferred_errors(void) {
  int64_t sh[2] = {10, 4}, ni = 2;
  dp_tensor *src = dp_zeros(DP_F32, 2, sh, GPU);
  dp_tensor *idx_cpu = dp_empty(DP_I64, 1, &ni, dp_cpu());
  ((int64_t *)dp_data(idx_cpu))[0] = 1;
  ((int64_t *)dp_data(idx_cpu))[1] = 11;
  dp_tensor *idx = dev(idx_cpu, GPU);
  int64_t osh[2] = {2, 4};
  dp_tensor *out = dp_empty(DP_F32, 2, osh, GPU);
  CHECK(cuda->index_select(out, src, idx, 1) == 0); /* queued: the kernel finds it */
  CHECK(cuda->synchronize(-1) != 0);
  CHECK(strstr(dp_errmsg(), "index 11 at position 2 is out of range 1..10") != NULL);
  CHECK(strstr(dp_errmsg(), "DDPLUA_CUDA_SYNC") != NULL);
  CHECK(cuda->synchronize(-1) == 0); /* raised once */
  /* in sync mode it is raised by the op itself */
  CHECK(cuda->set_option("sync", 1) == 0);
  CHECK(cuda->index_select(out, src, idx, 1) != 0);
  CHECK(strstr(dp_errmsg(), "index 11 at position 2") != NULL);
  CHECK(cuda->set_option("sync", 0) == 0);
  /* a class label out of range: NaN loss and the error at the next copy */
  int64_t lsh[2] = {2, 3}, two = 2;
  dp_tensor *logits = dp_zeros(DP_F32, 2, lsh, GPU);
  dp_tensor *t_cpu = dp_empty(DP_I64, 1, &two, dp_cpu());
  ((int64_t *)dp_data(t_cpu))[0] = 2;
  ((int64_t *)dp_data(t_cpu))[1] = 4;
  dp_tensor *target = dev(t_cpu, GPU);
  dp_tensor *loss = dp_empty(DP_F32, 1, &two, GPU), *lse = dp_empty(DP_F32, 1, &two, GPU);
  dp_ce_args ca = {.x = logits, .target = target, .base = 1, .ignore_index = -100, .smoothing = 0.0};
  CHECK(cuda->cross_entropy(loss, lse, &ca) == 0);
  double v;
  int64_t at[1] = {0};
  CHECK(dp_get_d(loss, at, &v) != 0);
  CHECK(strstr(dp_errmsg(), "target 4 at position 2 is out of range: classes are 1..3") != NULL);
  at[0] = 1;
  CHECK(dp_get_d(loss, at, &v) == 0 && isnan(v));
  at[0] = 0;
  CHECK(dp_get_d(loss, at, &v) == 0 && fabs(v - log(3.0)) < 1e-6);
  dp_release(src), dp_release(idx_cpu), dp_release(idx), dp_release(out), dp_release(logits), dp_release(t_cpu);
  dp_release(target), dp_release(loss), dp_release(lse);
}

static void test_unscale(void) {
  int64_t n = 1000;
  dp_tensor *a = dp_full(DP_F32, 1, &n, 8.0, GPU), *b = dp_full(DP_F32, 1, &n, 2.0, GPU);
  dp_tensor *gs[2] = {a, b};
  int found = 0;
  CHECK(cuda->unscale_list(gs, 2, 0.25, &found) == 0 && found == 0);
  dp_tensor *expect = dp_full(DP_F32, 1, &n, 2.0, dp_cpu());
  CHECK(bit_equal(a, expect));
  int64_t at[1] = {999};
  CHECK(dp_set_d(b, at, INFINITY) == 0);
  CHECK(cuda->unscale_list(gs, 2, 1.0, &found) == 0 && found == 1);
  dp_release(a), dp_release(b), dp_release(expect);
}

int main(void) {
  cuda = dp_backend_require(DP_CUDA);
  if (!cuda || cuda->device_count() < 1) {
    printf("skipped: %s\n", cuda ? "no GPU" : dp_errmsg());
    return getenv("DDPLUA_REQUIRE_GPU") && atoi(getenv("DDPLUA_REQUIRE_GPU")) ? 1 : 77;
  }
  printf("device: %s\n", cuda->device_name(0));
  /* the launcher's pre-fork count agrees with the driver's (where the
   * driver's /proc entries are visible: some containers hide them) */
  int prefork = dp_cuda_count_without_init();
  if (prefork == 0) printf("note: /proc/driver/nvidia/gpus is not readable: no pre-fork GPU count here\n");
  else CHECK(prefork == cuda->device_count());
  test_allocator();
  test_copies();
  test_random();
  test_grid_loops();
  test_gemm();
  test_reductions();
  test_deferred_errors();
  test_unscale();
  CHECK(cuda->synchronize(-1) == 0);
  TEST_DONE();
}
