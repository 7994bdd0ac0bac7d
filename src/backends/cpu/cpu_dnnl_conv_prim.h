/* oneDNN convolution primitives, cached per shape (cpu_dnnl_conv_prim.c),
 * for cpu_dnnl.c, which runs them: a shape's key, the primitive made for
 * it with the layouts it wants and the reorders into them, and the choice
 * between oneDNN's direct and Winograd algorithms. Only where the build has
 * oneDNN (DDPLUA_HAVE_DNNL). */
#ifndef DP_CPU_DNNL_CONV_PRIM_H
#define DP_CPU_DNNL_CONV_PRIM_H

#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

typedef enum { K_FWD, K_FWD_BIAS, K_BWD_DATA, K_BWD_WEIGHTS, K_BWD_WEIGHTS_BIAS } conv_kind;

typedef struct { /* all int64: no padding bytes, compared with memcmp */
  int64_t kind, n, c, h, w, o, kh, kw, sh, sw, ph, pw, oh, ow;
  int64_t groups, dh, dw;        /* groups (>= 1; weights [groups, o / groups, c / groups, kh, kw]); dilation */
  int64_t winograd;              /* 1: try oneDNN's Winograd kernels first (use_winograd) */
  int64_t bf16;                  /* 1: bfloat16 data, float32 weight and bias gradients (key_dt) */
  int64_t d, kd, sd, pd, dd, od; /* a 3-d convolution's depth (input, kernel, stride, padding, dilation, output);
                                  * all 0 for a 2-d one */
} conv_key;

/* a primitive and the layouts it wants: the two inputs (a, b) and the
 * output (c) in the primitive's own layout and in the user's; reorders
 * where the two differ (NULL where not) */
typedef struct conv_entry {
  conv_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[3], user[3];
  dnnl_primitive_t reorder[3]; /* a, b: user -> primitive; c: primitive -> user */
  bool winograd;               /* prim is a Winograd convolution */
  size_t scratch;
  struct conv_entry *next;
} conv_entry;

/* The key of a call of `kind` on n images of g's shape with o output
 * channels, in bfloat16 or float32 (winograd set by the rule of
 * use_winograd, float32 only). */
conv_key dp_dnnl_conv_key(int kind, int64_t n, const dp_window2d *g, int64_t o, bool bf16);
/* The same for n volumes of a 3-d convolution's geometry (float32, direct) */
conv_key dp_dnnl_conv_key3(int kind, int64_t n, const dp_window3d *g, int64_t o);
/* The cached entry for key; *temp set when it could not be cached (the
 * caller frees it). NULL without an error: oneDNN declines the shape. */
int dp_dnnl_conv_entry_get(const conv_key *k, conv_entry **out, bool *temp);
void dp_dnnl_conv_entry_free(conv_entry *e);
/* counts a call that ran e (dp_dnnl_winograd_calls) */
void dp_dnnl_conv_count_winograd(const conv_entry *e);

#endif
