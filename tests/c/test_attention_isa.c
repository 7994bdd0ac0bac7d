/* The CPU attention's float32 tiles compiled for each instruction set
 * (AVX-512, AVX2, plain; those this CPU runs) against its float64
 * reference path, forward and backward, with a causal cut, a boolean and a
 * float mask, dropout, and sizes off the tile edges, and identical keys and
 * values giving exactly zero gradients for q and k: the specs only reach
 * the variant the CPU picks, this reaches them all. */
#include <math.h>
#include <string.h>

#include "autograd/autograd.h"
#include "backends/cpu/cpu_model_kernels.h"
#include "core/error.h"
#include "ops/model_ops.h"
#include "ops/op_util.h"
#include "test_util.h"

static double max_rel(dp_tensor *a, dp_tensor *b) {
  dp_tensor *ad = dp_to(a, DP_F64, dp_cpu()), *bd = dp_to(b, DP_F64, dp_cpu());
  const double *x = dp_data(ad), *y = dp_data(bd);
  double m = 0, scale = 0.1; /* an all-zero reference (one visible key: dq = 0) is compared absolutely */
  for (int64_t i = 0; i < dp_numel(ad); i++) scale = fmax(scale, fabs(y[i]));
  for (int64_t i = 0; i < dp_numel(ad); i++) m = fmax(m, fabs(x[i] - y[i]) / scale);
  dp_release(ad), dp_release(bd);
  return m;
}

/* out and the three input gradients for inputs of dtype dt */
static void run(dp_dtype dt, dp_tensor *const *in64, dp_tensor *mask, bool causal, double p, dp_tensor **res) {
  dp_tensor *in[3];
  for (int i = 0; i < 3; i++) {
    dp_tensor *c = dp_to(in64[i], dt, dp_cpu());
    in[i] = dp_copy_raw(c); /* a fresh leaf, whatever in64 is */
    dp_release(c);
    in[i]->requires_grad = true;
  }
  dp_tensor *m = mask && mask->dtype != DP_U8 ? dp_to(mask, dt, dp_cpu()) : (mask ? (dp_retain(mask), mask) : NULL);
  dp_manual_seed(9);
  dp_tensor *y = dp_scaled_dot_product_attention(in[0], in[1], in[2], m, causal, p, -1);
  CHECK(y != NULL);
  if (!y) return;
  dp_tensor *w = dp_randn(dt, y->ndim, y->shape, dp_cpu()), *yw = dp_mul(y, w), *s = dp_sum(yw, 0, NULL, false);
  CHECK(dp_backward(s, NULL, false) == 0);
  res[0] = y;
  for (int i = 0; i < 3; i++) res[i + 1] = in[i]->grad ? (dp_retain(in[i]->grad), in[i]->grad) : NULL;
  dp_release(w), dp_release(yw), dp_release(s), dp_clear(&m);
  for (int i = 0; i < 3; i++) dp_release(in[i]);
}

int main(void) {
  const char *names[3] = {"plain", "avx2", "avx512"};
  int64_t cases[][3] = {{70, 65, 32}, {1, 130, 16}, {129, 40, 17}, {200, 260, 8}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t L = cases[c][0], S = cases[c][1], E = cases[c][2];
    dp_manual_seed(1 + c);
    dp_tensor *in64[3] = {dp_randn(DP_F64, 3, (int64_t[]){2, L, E}, dp_cpu()),
                          dp_randn(DP_F64, 3, (int64_t[]){2, S, E}, dp_cpu()),
                          dp_randn(DP_F64, 3, (int64_t[]){2, S, E + 5}, dp_cpu())};
    dp_tensor *noise = dp_randn(DP_F64, 2, (int64_t[]){L, S}, dp_cpu());
    dp_tensor *bmask = dp_binary_scalar(DP_B_GT, noise, -0.8, false);
    for (int variant = 0; variant < 4; variant++) {
      dp_tensor *mask = variant == 1 ? bmask : variant == 2 ? noise : NULL;
      bool causal = variant == 0;
      double p = variant == 3 ? 0.25 : 0;
      dp_tensor *ref[4] = {0};
      run(DP_F64, in64, mask, causal, p, ref);
      for (int isa = 0; isa < 3; isa++) {
        if (dp_cpu_attention_force_isa(isa)) continue; /* this CPU lacks it */
        dp_tensor *got[4] = {0};
        run(DP_F32, in64, mask, causal, p, got);
        for (int k = 0; k < 4; k++) {
          double e = got[k] && ref[k] ? max_rel(got[k], ref[k]) : 1;
          if (!(e < 1e-4))
            fprintf(stderr, "%s case %zu variant %d output %d: relative error %.3g\n", names[isa], c, variant, k, e);
          CHECK(e < 1e-4);
          dp_clear(&got[k]);
        }
      }
      dp_cpu_attention_force_isa(-1);
      for (int k = 0; k < 4; k++) dp_clear(&ref[k]);
    }
    for (int i = 0; i < 3; i++) dp_release(in64[i]);
    dp_release(noise), dp_release(bmask);
  }
  /* identical keys and values (one row expanded, then copied by run): every dZ of a row is equal, so dS and the
   * gradients of q and k are exactly 0 on every ISA where the row term comes from the tile (heads of up to 128
   * keys; with rowsum(dO O), 130 keys, about a quarter of them came out nonzero, O's rounding) */
  for (int64_t S = 40; S <= 128; S += 88) {
    dp_manual_seed(21);
    dp_tensor *k1 = dp_randn(DP_F64, 3, (int64_t[]){2, 1, 16}, dp_cpu()),
              *v1 = dp_randn(DP_F64, 3, (int64_t[]){2, 1, 7}, dp_cpu());
    dp_tensor *in64[3] = {dp_randn(DP_F64, 3, (int64_t[]){2, 33, 16}, dp_cpu()),
                          dp_expand(k1, 3, (int64_t[]){2, S, 16}), dp_expand(v1, 3, (int64_t[]){2, S, 7})};
    for (int isa = 0; isa < 3; isa++) {
      if (dp_cpu_attention_force_isa(isa)) continue;
      for (int causal = 0; causal < 2; causal++) {
        dp_tensor *got[4] = {0};
        run(DP_F32, in64, NULL, causal, 0, got);
        for (int k = 1; k < 3; k++) {
          CHECK(got[k] != NULL);
          if (!got[k]) continue;
          dp_tensor *gd = dp_to(got[k], DP_F64, dp_cpu());
          const double *g = dp_data(gd);
          int64_t nonzero = 0;
          for (int64_t i = 0; i < dp_numel(gd); i++) nonzero += g[i] != 0;
          if (nonzero)
            fprintf(stderr, "%s S=%lld causal=%d: %lld nonzero gradient elements of input %d\n", names[isa],
                    (long long)S, causal, (long long)nonzero, k);
          CHECK(nonzero == 0);
          dp_release(gd);
        }
        for (int k = 0; k < 4; k++) dp_clear(&got[k]);
      }
    }
    dp_cpu_attention_force_isa(-1);
    for (int i = 0; i < 3; i++) dp_release(in64[i]);
    dp_release(k1), dp_release(v1);
  }
  TEST_DONE();
}
