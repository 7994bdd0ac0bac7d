/* oneDNN convolution primitives, cached per shape (cpu_dnnl_conv_prim.h).
 * A primitive is made for the blocked layouts oneDNN picks for this CPU
 * (format "any"), with reorders from and to the user's NCHW / OIHW; the
 * backward ones take the forward's descriptor as their hint. */
#include "backends/cpu/cpu_dnnl.h"

#ifndef DDPLUA_HAVE_DNNL
bool dp_dnnl_winograd_enabled(void) { return false; }
void dp_dnnl_set_winograd(bool on) { (void)on; }
long dp_dnnl_winograd_calls(void) { return 0; }
#else

#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_dnnl_conv_prim.h"
#include "backends/cpu/cpu_dnnl_core.h"
#include "core/error.h"

enum { CACHE_MAX = DP_DNNL_CACHE_MAX };
static conv_entry *cache;
static int cached;

/* The data type of a key's operand i (0 src / diff_src, 1 weights, 2 dst /
 * diff_dst; 3 the bias): bfloat16 keys compute in bfloat16 and keep the
 * weight gradient and the bias gradient in float32 (the chunks' partial
 * sums add up in float32, rounded once by the caller). */
static dnnl_data_type_t key_dt(const conv_key *k, int i) {
  if (!k->bf16) return dnnl_f32;
  bool bwd_w = k->kind == K_BWD_WEIGHTS || k->kind == K_BWD_WEIGHTS_BIAS;
  return bwd_w && (i == 1 || i == 3) ? dnnl_f32 : dnnl_bf16;
}

/* The descriptor of an activation: the input (src, diff_src) or, with out, the output (dst, diff_dst) of a key's
 * call, [n, c, h, w] (NCHW in the user's layout) or for a 3-d key [n, c, d, h, w] (NCDHW); with user false the
 * layout is left to oneDNN. */
static void act_md(dnnl_memory_desc_t *m, const conv_key *k, bool out, bool user, dnnl_data_type_t dt) {
  int64_t ch = out ? k->o : k->c, h = out ? k->oh : k->h, w = out ? k->ow : k->w;
  if (k->d) {
    dnnl_dims_t dims = {k->n, ch, out ? k->od : k->d, h, w};
    dnnl_memory_desc_init_by_tag(m, 5, dims, dt, user ? dnnl_ncdhw : dnnl_format_tag_any);
    return;
  }
  dnnl_dims_t dims = {k->n, ch, h, w};
  dnnl_memory_desc_init_by_tag(m, 4, dims, dt, user ? dnnl_nchw : dnnl_format_tag_any);
}

/* the weights' descriptor: [o, c / groups, kh, kw] dense (OIHW), or with groups [groups, o / groups, c / groups,
 * kh, kw] (GOIHW: the same bytes); a 3-d key's with kd before kh (OIDHW, GOIDHW) */
static void wei_md(dnnl_memory_desc_t *m, const conv_key *k, bool user, dnnl_data_type_t dt) {
  int64_t g = k->groups > 1 ? k->groups : 1;
  dnnl_dims_t dims;
  int nd = 0;
  if (g > 1) dims[nd++] = g;
  dims[nd++] = k->o / g, dims[nd++] = k->c / g;
  if (k->d) dims[nd++] = k->kd;
  dims[nd++] = k->kh, dims[nd++] = k->kw;
  static const dnnl_format_tag_t tags[2][2] = {{dnnl_oihw, dnnl_goihw}, {dnnl_oidhw, dnnl_goidhw}};
  dnnl_memory_desc_init_by_tag(m, nd, dims, dt, user ? tags[k->d ? 1 : 0][g > 1] : dnnl_format_tag_any);
}

/* strides, dilations (oneDNN counts the gaps: dilation - 1) and the two paddings of a key, depth first for a 3-d
 * key; the far side's padding is whatever the last window leaves over */
static void window_dims(const conv_key *k, dnnl_dims_t s, dnnl_dims_t d, dnnl_dims_t pl, dnnl_dims_t pr) {
  int i = 0;
  if (k->d) {
    s[0] = k->sd, d[0] = k->dd - 1, pl[0] = k->pd;
    pr[0] = (k->od - 1) * k->sd + (k->kd - 1) * k->dd + 1 - k->d - k->pd;
    i = 1;
  }
  s[i] = k->sh, s[i + 1] = k->sw;
  d[i] = k->dh - 1, d[i + 1] = k->dw - 1;
  pl[i] = k->ph, pl[i + 1] = k->pw;
  pr[i] = (k->oh - 1) * k->sh + (k->kh - 1) * k->dh + 1 - k->h - k->ph;
  pr[i + 1] = (k->ow - 1) * k->sw + (k->kw - 1) * k->dw + 1 - k->w - k->pw;
}

void dp_dnnl_conv_entry_free(conv_entry *e) {
  if (!e) return;
  if (e->prim) dnnl_primitive_destroy(e->prim);
  for (int i = 0; i < 3; i++)
    if (e->reorder[i]) dnnl_primitive_destroy(e->reorder[i]);
  free(e);
}

/* The forward primitive descriptor for a shape (the backward ones need it
 * as their hint). NULL when oneDNN has no implementation. */
static dnnl_primitive_desc_t fwd_pd(const conv_key *k, dnnl_alg_kind_t alg, bool bias,
                                    const dnnl_primitive_attr_t attr) {
  dnnl_memory_desc_t src, wei, dst, b;
  dnnl_data_type_t dt = k->bf16 ? dnnl_bf16 : dnnl_f32; /* the forward of every kind: its hint */
  act_md(&src, k, false, false, dt);
  wei_md(&wei, k, false, dt);
  act_md(&dst, k, true, false, dt);
  dnnl_dims_t bd = {k->o};
  dnnl_memory_desc_init_by_tag(&b, 1, bd, dt, dnnl_x);
  dnnl_dims_t s, d, pl, pr;
  window_dims(k, s, d, pl, pr);
  dnnl_convolution_desc_t cd;
  if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &src, &wei, bias ? &b : NULL, &dst, s,
                                                 d, pl, pr) != dnnl_success)
    return NULL;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_primitive_desc_create(&pd, &cd, attr, dp_dnnl_engine(), NULL) != dnnl_success) return NULL;
  return pd;
}

/* Builds the entry for key with algorithm alg (NULL + no error when oneDNN
 * declines). */
static int entry_make_alg(const conv_key *k, dnnl_alg_kind_t alg, conv_entry **out) {
  dp_dnnl_one_omp_thread();
  *out = NULL;
  dnnl_primitive_attr_t attr;
  DN_CHECK(dnnl_primitive_attr_create(&attr));
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  bool bias = k->kind == K_FWD_BIAS || k->kind == K_BWD_WEIGHTS_BIAS;
  dnnl_primitive_desc_t hint = fwd_pd(k, alg, k->kind == K_FWD_BIAS || k->kind == K_BWD_WEIGHTS_BIAS, attr), pd = hint;
  if (!hint) {
    dnnl_primitive_attr_destroy(attr);
    return 0;
  }
  dnnl_query_t q[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
  dnnl_memory_desc_t user[3];
  if (k->kind == K_BWD_DATA || k->kind == K_BWD_WEIGHTS || k->kind == K_BWD_WEIGHTS_BIAS) {
    const dnnl_memory_desc_t *src = dnnl_primitive_desc_query_md(hint, dnnl_query_src_md, 0),
                             *wei = dnnl_primitive_desc_query_md(hint, dnnl_query_weights_md, 0),
                             *dst = dnnl_primitive_desc_query_md(hint, dnnl_query_dst_md, 0);
    dnnl_memory_desc_t sa, wa, da, b;
    act_md(&sa, k, false, false, key_dt(k, 0));
    wei_md(&wa, k, false, key_dt(k, 1));
    act_md(&da, k, true, false, key_dt(k, 2));
    (void)src, (void)wei, (void)dst;
    dnnl_dims_t bd = {k->o};
    dnnl_memory_desc_init_by_tag(&b, 1, bd, key_dt(k, 3), dnnl_x);
    dnnl_dims_t s, d, pl, pr;
    window_dims(k, s, d, pl, pr);
    dnnl_convolution_desc_t cd;
    dnnl_status_t st = k->kind == K_BWD_DATA
                           ? dnnl_dilated_convolution_backward_data_desc_init(&cd, alg, &sa, &wa, &da, s, d, pl, pr)
                           : dnnl_dilated_convolution_backward_weights_desc_init(&cd, alg, &sa, &wa, bias ? &b : NULL,
                                                                                 &da, s, d, pl, pr);
    pd = NULL;
    if (st == dnnl_success && dnnl_primitive_desc_create(&pd, &cd, attr, dp_dnnl_engine(), hint) != dnnl_success)
      pd = NULL;
    dnnl_primitive_desc_destroy(hint);
    if (!pd) {
      dnnl_primitive_attr_destroy(attr);
      return 0;
    }
    if (k->kind == K_BWD_DATA) { /* in: diff_dst, weights; out: diff_src */
      q[0] = dnnl_query_diff_dst_md, q[1] = dnnl_query_weights_md, q[2] = dnnl_query_diff_src_md;
      act_md(&user[0], k, true, true, key_dt(k, 2));
      wei_md(&user[1], k, true, key_dt(k, 1));
      act_md(&user[2], k, false, true, key_dt(k, 0));
    } else { /* in: src, diff_dst; out: diff_weights */
      q[0] = dnnl_query_src_md, q[1] = dnnl_query_diff_dst_md, q[2] = dnnl_query_diff_weights_md;
      act_md(&user[0], k, false, true, key_dt(k, 0));
      act_md(&user[1], k, true, true, key_dt(k, 2));
      wei_md(&user[2], k, true, key_dt(k, 1));
    }
  } else {
    act_md(&user[0], k, false, true, key_dt(k, 0));
    wei_md(&user[1], k, true, key_dt(k, 1));
    act_md(&user[2], k, true, true, key_dt(k, 2));
  }
  dnnl_primitive_attr_destroy(attr);
  conv_entry *e = calloc(1, sizeof *e);
  if (!e) {
    dnnl_primitive_desc_destroy(pd);
    return dp_error("oneDNN: out of memory for a primitive");
  }
  e->key = *k;
  for (int i = 0; i < 3; i++) {
    e->md[i] = *dnnl_primitive_desc_query_md(pd, q[i], 0);
    e->user[i] = user[i];
  }
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
  dnnl_status_t st = dnnl_primitive_create(&e->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  int rc = st == dnnl_success ? 0 : dp_error("oneDNN: convolution primitive failed (status %d)", (int)st);
  if (!rc) rc = dp_dnnl_make_reorder(&e->reorder[0], &e->user[0], &e->md[0]);
  if (!rc) rc = dp_dnnl_make_reorder(&e->reorder[1], &e->user[1], &e->md[1]);
  if (!rc) rc = dp_dnnl_make_reorder(&e->reorder[2], &e->md[2], &e->user[2]);
  if (rc) {
    dp_dnnl_conv_entry_free(e);
    return -1;
  }
  *out = e;
  return 0;
}

/* Winograd (oneDNN's F(4x4, 3x3) kernels) for 3x3, stride-1 convolutions
 * of 32 or more input and output channels (multiples of 16, which its
 * kernels need): fewer multiplications per output. Measured on one AMD
 * EPYC core, forward + both backwards, direct / Winograd (ms): 32->64 at
 * 14x14 batch 64 (the Fashion-MNIST CNN) 13.8-16.3 / 10.4-12.4, 64->64 at
 * 7x7 6.1 / 4.6, 64->64 at 56x56 batch 32 225 / 113, 256->256 at 14x14
 * 206 / 103, 512->512 at 7x7 233 / 109; at 2 threads 1.15-1.9x likewise.
 * With 16 channels it was slower (16x16: 2.4 / 3.9 ms) or even. Its
 * float32 results differ from direct's by rounding: against float64, the
 * 32->64 layer's output was within 1.1e-6 of its largest value (direct
 * 3.2e-7), the input gradient 1.8e-6 (3.2e-7), the weight gradient 7.3e-7
 * (2.5e-6); on the differential suite's cases (integer and scaled values,
 * results near 0 by cancellation) up to 2.1e-5 of the largest value, which
 * docs/pytorch_differences.md lists (winograd_rounding).
 * DDPLUA_CONV_WINOGRAD=0 keeps every convolution direct, as PyTorch's CPU
 * convolutions are. */
static int winograd_on = -1; /* -1: not yet read from the environment (atomic) */

bool dp_dnnl_winograd_enabled(void) {
  int on = __atomic_load_n(&winograd_on, __ATOMIC_RELAXED);
  if (on < 0) {
    const char *e = getenv("DDPLUA_CONV_WINOGRAD");
    on = !(e && strcmp(e, "0") == 0);
    __atomic_store_n(&winograd_on, on, __ATOMIC_RELAXED);
  }
  return on;
}
void dp_dnnl_set_winograd(bool on) { __atomic_store_n(&winograd_on, on ? 1 : 0, __ATOMIC_RELAXED); }

static long winograd_calls; /* atomic */
long dp_dnnl_winograd_calls(void) { return __atomic_load_n(&winograd_calls, __ATOMIC_RELAXED); }
void dp_dnnl_conv_count_winograd(const conv_entry *e) {
  if (e->winograd) __atomic_fetch_add(&winograd_calls, 1, __ATOMIC_RELAXED);
}

static bool use_winograd(const conv_key *k) {
  return dp_dnnl_winograd_enabled() && k->groups == 1 && k->dh == 1 && k->dw == 1 && k->kh == 3 && k->kw == 3 &&
         k->sh == 1 && k->sw == 1 && k->c >= 32 && k->o >= 32 && k->c % 16 == 0 && k->o % 16 == 0;
}

/* A Winograd primitive's scratchpad holds the transformed tiles of its
 * whole chunk: the weight gradient of 256 -> 256 channels at 28x28, one
 * chunk of 32 images per thread, wanted 136 MiB each (the forward's chunks
 * of 4-5 images 29-32 MiB, the CNN's layer 6.5-8.6 MiB), and a forward +
 * backward of that layer at batch 64 peaked at 650 MiB of tensors against
 * direct's 362. Past this bound a call runs direct instead. */
#define WINOGRAD_SCRATCH_MAX ((size_t)64 << 20)

/* The entry for key: Winograd where use_winograd says so, oneDNN has it for
 * the shape and its scratchpad is within bounds, else direct. */
static int entry_make(const conv_key *k, conv_entry **out) {
  if (k->winograd && entry_make_alg(k, dnnl_convolution_winograd, out) == 0 && *out) {
    if ((*out)->scratch <= WINOGRAD_SCRATCH_MAX) {
      (*out)->winograd = true;
      return 0;
    }
    dp_dnnl_conv_entry_free(*out);
    *out = NULL;
  }
  return entry_make_alg(k, dnnl_convolution_direct, out);
}

/* The cached entry for key; *temp set when it could not be cached (the
 * caller frees it). NULL without an error: oneDNN declines the shape. */
int dp_dnnl_conv_entry_get(const conv_key *k, conv_entry **out, bool *temp) {
  *temp = false;
  dp_dnnl_cache_lock();
  for (conv_entry *e = cache; e; e = e->next)
    if (memcmp(&e->key, k, sizeof *k) == 0) {
      dp_dnnl_cache_unlock();
      *out = e;
      return 0;
    }
  dp_dnnl_cache_unlock();
  if (entry_make(k, out)) return -1;
  if (!*out) return 0;
  dp_dnnl_cache_lock();
  if (cached < CACHE_MAX) {
    (*out)->next = cache;
    cache = *out;
    cached++;
  } else {
    *temp = true;
  }
  dp_dnnl_cache_unlock();
  return 0;
}

conv_key dp_dnnl_conv_key(int kind, int64_t n, const dp_window2d *g, int64_t o, bool bf16) {
  conv_key k = {.kind = kind,
                .n = n,
                .c = g->c,
                .h = g->h,
                .w = g->w,
                .o = o,
                .kh = g->kh,
                .kw = g->kw,
                .sh = g->sh,
                .sw = g->sw,
                .ph = g->ph,
                .pw = g->pw,
                .oh = g->oh,
                .ow = g->ow,
                .groups = g->groups > 1 ? g->groups : 1,
                .dh = g->dh,
                .dw = g->dw,
                .bf16 = bf16};
  k.winograd = !bf16 && use_winograd(&k); /* oneDNN's Winograd kernels are float32 */
  return k;
}

conv_key dp_dnnl_conv_key3(int kind, int64_t n, const dp_window3d *g, int64_t o) {
  conv_key k = {.kind = kind,
                .n = n,
                .c = g->c,
                .h = g->h,
                .w = g->w,
                .o = o,
                .kh = g->kh,
                .kw = g->kw,
                .sh = g->sh,
                .sw = g->sw,
                .ph = g->ph,
                .pw = g->pw,
                .oh = g->oh,
                .ow = g->ow,
                .groups = g->groups > 1 ? g->groups : 1,
                .dh = g->dh,
                .dw = g->dw,
                .d = g->d,
                .kd = g->kd,
                .sd = g->sd,
                .pd = g->pd,
                .dd = g->dd,
                .od = g->od};
  return k;
}

#endif
