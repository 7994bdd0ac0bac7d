/* The CPU attention's float64 reference path (contract in
 * cpu_attention_stage.h and backends/backend.h, dp_attn_args): one query
 * row at a time in double, through dp_load_d / dp_store_d for any dtypes,
 * the softmax over all keys at once (no tiles, no online rescaling). It
 * takes float64 and whatever cpu_attention.c's float32 tiles do not, and
 * the tiles are tested against it (tests/c/test_attention_isa.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attention_stage.h"
#include "core/error.h"
#include "ops/model_math.h"

#define LDT(t, off) dp_load_d((const char *)dp_data(t) + (size_t)(off)*dp_elsize(t), (t)->dtype)
#define STT(t, off, v) dp_store_d((char *)dp_data(t) + (size_t)(off)*dp_elsize(t), (t)->dtype, (v))

static int64_t off4(const dp_tensor *t, const dp_attn_args *a, int64_t bh, int64_t row, int64_t col) {
  return (bh / a->b2) * t->stride[0] + (bh % a->b2) * t->stride[1] + row * t->stride[2] + col * t->stride[3];
}

/* scores of query i against every key, masked; returns their maximum */
static double ref_scores(const dp_attn_args *a, int64_t bh, int64_t i, double *s) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < a->S; j++) {
    double d = 0;
    for (int64_t e = 0; e < a->E; e++) d += LDT(a->q, off4(a->q, a, bh, i, e)) * LDT(a->k, off4(a->k, a, bh, j, e));
    d *= a->scale;
    if (a->mask) {
      int64_t mo = off4(a->mask, a, bh, i, j);
      if (a->mask_bool) d = ((const uint8_t *)dp_data(a->mask))[mo] ? d : -INFINITY;
      else d += LDT(a->mask, mo);
    }
    if (a->causal && j > i) d = -INFINITY;
    s[j] = d;
    mx = d > mx ? d : mx;
  }
  return mx;
}

static double ref_keep(const dp_attn_args *a, int64_t bh, int64_t i, int64_t j) {
  if (a->dropout_p <= 0) return 1.0;
  uint64_t e = (uint64_t)((bh * a->L + i) * a->S + j);
  return dp_attn_keep(a->seed, a->offset, e, (float)a->dropout_p) ? 1.0 / (1.0 - a->dropout_p) : 0.0;
}

int dp_attn_ref_forward(dp_tensor *out, dp_tensor *lse, const dp_attn_args *a) {
  int64_t BH = a->b1 * a->b2, L = a->L, S = a->S, Ev = a->Ev;
  double *s = malloc(sizeof(double) * (size_t)(S + Ev + 1));
  if (!s) return dp_error("attention: out of memory");
  double *acc = s + S;
  for (int64_t bh = 0; bh < BH; bh++)
    for (int64_t i = 0; i < L; i++) {
      double mx = ref_scores(a, bh, i, s), l = 0;
      for (int64_t e = 0; e < Ev; e++) acc[e] = 0;
      if (mx != -INFINITY)
        for (int64_t j = 0; j < S; j++) {
          double p = exp(s[j] - mx);
          l += p;
          double z = p * ref_keep(a, bh, i, j);
          for (int64_t e = 0; e < Ev; e++) acc[e] += z * LDT(a->v, off4(a->v, a, bh, j, e));
        }
      for (int64_t e = 0; e < Ev; e++) {
        STT(out, off4(out, a, bh, i, e), l > 0 ? acc[e] / l : 0.0);
        if (a->out_f32) STT(a->out_f32, off4(a->out_f32, a, bh, i, e), l > 0 ? acc[e] / l : 0.0);
      }
      STT(lse, bh * L + i, l > 0 ? mx + log(l) : -INFINITY);
    }
  free(s);
  return 0;
}

int dp_attn_ref_backward(dp_tensor *gq, dp_tensor *gk, dp_tensor *gv, dp_tensor *gmask, const dp_attn_args *a) {
  int64_t BH = a->b1 * a->b2, L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  double *s = malloc(sizeof(double) * (size_t)(S + E + S * E + S * Ev));
  if (!s) return dp_error("attention: out of memory");
  double *dq = s + S, *dk = dq + E, *dv = dk + S * E;
  for (int64_t bh = 0; bh < BH; bh++) {
    memset(dk, 0, sizeof(double) * (size_t)(S * E + S * Ev));
    for (int64_t i = 0; i < L; i++) {
      double li = LDT(a->lse, bh * L + i), Di = 0;
      ref_scores(a, bh, i, s);
      for (int64_t e = 0; e < Ev; e++)
        Di += LDT(a->gout, off4(a->gout, a, bh, i, e)) * LDT(a->out, off4(a->out, a, bh, i, e));
      for (int64_t e = 0; e < E; e++) dq[e] = 0;
      for (int64_t j = 0; j < S; j++) {
        double p = li == -INFINITY ? 0.0 : exp(s[j] - li), keep = ref_keep(a, bh, i, j), dz = 0;
        for (int64_t e = 0; e < Ev; e++) {
          double go = LDT(a->gout, off4(a->gout, a, bh, i, e));
          dv[j * Ev + e] += p * keep * go;
          dz += go * LDT(a->v, off4(a->v, a, bh, j, e));
        }
        double ds = p * (dz * keep - Di);
        if (gmask) STT(gmask, off4(gmask, a, bh, i, j), ds);
        for (int64_t e = 0; e < E; e++) {
          dq[e] += a->scale * ds * LDT(a->k, off4(a->k, a, bh, j, e));
          dk[j * E + e] += a->scale * ds * LDT(a->q, off4(a->q, a, bh, i, e));
        }
      }
      for (int64_t e = 0; e < E; e++) STT(gq, off4(gq, a, bh, i, e), dq[e]);
    }
    for (int64_t j = 0; j < S; j++) {
      for (int64_t e = 0; e < E; e++) STT(gk, off4(gk, a, bh, j, e), dk[j * E + e]);
      for (int64_t e = 0; e < Ev; e++) STT(gv, off4(gv, a, bh, j, e), dv[j * Ev + e]);
    }
  }
  free(s);
  return 0;
}
