/* The transform pipeline (see image_transform.h). */
#include "data/image_transform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/philox.h"

const char *dp_img_step_name(dp_img_op op) {
  switch (op) {
  case DP_IMG_RESIZE: return "Resize";
  case DP_IMG_ROTATE: return "RandomRotation";
  case DP_IMG_HFLIP: return "RandomHorizontalFlip";
  case DP_IMG_TO_TENSOR: return "ToTensor";
  case DP_IMG_NORMALIZE: return "Normalize";
  }
  return "?";
}

int dp_img_pipeline_check(const dp_img_pipeline *p, int channels, bool require_to_tensor) {
  if (p->n < 0 || p->n > DP_IMG_MAX_STEPS)
    return dp_error("transforms: %d transforms given, at most %d are supported", p->n, DP_IMG_MAX_STEPS);
  int to_tensor_at = -1;
  for (int i = 0; i < p->n; i++) {
    const dp_img_step *s = &p->step[i];
    const char *name = dp_img_step_name(s->op);
    switch (s->op) {
    case DP_IMG_RESIZE:
      if (s->height <= 0 || s->width < 0 || (s->width == 0 && s->height <= 0))
        return dp_error("transform %d (%s): size %dx%d must be positive", i + 1, name, s->height, s->width);
      break;
    case DP_IMG_ROTATE:
      if (!(s->lo <= s->hi) || !isfinite(s->lo) || !isfinite(s->hi))
        return dp_error("transform %d (%s): degree range [%g, %g] must be finite with min <= max", i + 1, name, s->lo,
                        s->hi);
      break;
    case DP_IMG_HFLIP:
      if (!(s->p >= 0 && s->p <= 1)) return dp_error("transform %d (%s): p = %g is not in [0, 1]", i + 1, name, s->p);
      break;
    case DP_IMG_TO_TENSOR:
      if (to_tensor_at >= 0)
        return dp_error("transform %d (%s): ToTensor already appears as transform %d", i + 1, name, to_tensor_at + 1);
      to_tensor_at = i;
      break;
    case DP_IMG_NORMALIZE:
      if (to_tensor_at < 0)
        return dp_error("transform %d (%s): needs ToTensor before it (the image is still 0..255 pixels)", i + 1, name);
      if (s->n != 1 && s->n != channels)
        return dp_error("transform %d (%s): %d means/stds for images with %d channel%s (expected 1 or %d)", i + 1, name,
                        s->n, channels, channels == 1 ? "" : "s", channels);
      for (int c = 0; c < s->n; c++)
        if (s->std[c] == 0 || !isfinite(s->std[c]) || !isfinite(s->mean[c]))
          return dp_error("transform %d (%s): std[%d] = %g, mean[%d] = %g (std must be finite and non-zero)", i + 1,
                          name, c + 1, s->std[c], c + 1, s->mean[c]);
      break;
    }
  }
  if (require_to_tensor && to_tensor_at < 0)
    return dp_error("transforms: ToTensor() is missing (images become float32 tensors in [0, 1] through it)");
  return 0;
}

/* torchvision's rule for Resize(size): the smaller edge becomes size, the
 * longer one int(size * long / short). */
static void resize_target(const dp_img_step *s, int h, int w, int *oh, int *ow) {
  if (s->width > 0) {
    *oh = s->height;
    *ow = s->width;
  } else if (w <= h) {
    *ow = s->height;
    *oh = (int)((int64_t)s->height * h / w);
  } else {
    *oh = s->height;
    *ow = (int)((int64_t)s->height * w / h);
  }
}

void dp_img_output_size(const dp_img_pipeline *p, int h, int w, int *oh, int *ow) {
  for (int i = 0; i < p->n; i++)
    if (p->step[i].op == DP_IMG_RESIZE) resize_target(&p->step[i], h, w, &h, &w);
  *oh = h;
  *ow = w;
}

bool dp_img_fixed_size(const dp_img_pipeline *p, int *h, int *w) {
  bool fixed = false;
  for (int i = 0; i < p->n; i++) {
    const dp_img_step *s = &p->step[i];
    if (s->op != DP_IMG_RESIZE) continue;
    fixed = s->width > 0;
    *h = s->height;
    *w = s->width;
  }
  return fixed;
}

dp_img_rng dp_img_rng_for(uint64_t seed, uint64_t epoch, uint64_t draw, uint64_t item) {
  dp_philox4 k = dp_philox(seed, epoch);
  dp_img_rng r = {((uint64_t)k.v[1] << 32) | k.v[0], (draw << 40) | ((item & ((1ull << 36) - 1)) << 4)};
  return r;
}

/* Uniform in [0, 1) with 53 bits, for step k. */
static double step_uniform(dp_img_rng r, int k) {
  dp_philox4 x = dp_philox(r.key, r.base + (uint64_t)k);
  return dp_u64_to_uniform_d(x.v[0], x.v[1]);
}

void dp_img_scratch_free(dp_img_scratch *s) {
  free(s->buf[0]);
  free(s->buf[1]);
  free(s->idx);
  free(s->wt);
  memset(s, 0, sizeof *s);
}

static float *scratch_buf(dp_img_scratch *s, int which, size_t n) {
  if (s->cap[which] < n) {
    free(s->buf[which]);
    s->buf[which] = dp_xmalloc(n * sizeof(float));
    s->cap[which] = n;
  }
  return s->buf[which];
}

/* ---- the geometric steps: float CHW in, float CHW out ---- */

/* Source positions of PyTorch's bilinear (align_corners=False): src =
 * (dst + 0.5) * in / out - 0.5, clamped at 0; neighbours i0 and i0 + 1
 * (or i0 at the last pixel) with weight t on the second. */
static void bilinear_table(int in, int out, int32_t *i0, int32_t *i1, float *t) {
  double scale = (double)in / out;
  for (int o = 0; o < out; o++) {
    double src = (o + 0.5) * scale - 0.5;
    if (src < 0) src = 0;
    int a = (int)src;
    if (a > in - 1) a = in - 1;
    i0[o] = a;
    i1[o] = a + (a < in - 1);
    t[o] = (float)(src - a);
  }
}

static void resize(const float *src, float *dst, int C, int h, int w, int oh, int ow, dp_img_scratch *s) {
  size_t need = (size_t)2 * (size_t)(oh + ow);
  if (s->tcap < need) {
    free(s->idx);
    free(s->wt);
    s->idx = dp_xmalloc(need * sizeof *s->idx);
    s->wt = dp_xmalloc(need * sizeof *s->wt);
    s->tcap = need;
  }
  int32_t *y0 = s->idx, *y1 = y0 + oh, *x0 = y1 + oh, *x1 = x0 + ow;
  float *ty = s->wt, *tx = ty + oh;
  bilinear_table(h, oh, y0, y1, ty);
  bilinear_table(w, ow, x0, x1, tx);
  for (int c = 0; c < C; c++) {
    const float *plane = src + (size_t)c * h * w;
    float *out = dst + (size_t)c * oh * ow;
    for (int y = 0; y < oh; y++) {
      const float *r0 = plane + (size_t)y0[y] * w, *r1 = plane + (size_t)y1[y] * w;
      float b = ty[y], a = 1.0f - b;
      for (int x = 0; x < ow; x++) {
        float u = tx[x];
        float top = r0[x0[x]] + u * (r0[x1[x]] - r0[x0[x]]);
        float bot = r1[x0[x]] + u * (r1[x1[x]] - r1[x0[x]]);
        out[(size_t)y * ow + x] = a * top + b * bot;
      }
    }
  }
}

/* Rotation by `deg` counter-clockwise about the centre ((w-1)/2, (h-1)/2)
 * in pixel-centre coordinates (torchvision's rotate). Output pixel (x, y)
 * samples the input at the inverse rotation of its offset from the centre;
 * neighbours outside the image count as zero. */
static void rotate(const float *src, float *dst, int C, int h, int w, double deg) {
  double cs, sn;
  double q = deg / 90.0;
  if (q == floor(q)) { /* exact quarter turns: no cos(pi/2) = 6e-17 blur */
    static const double qc[4] = {1, 0, -1, 0}, qs[4] = {0, 1, 0, -1};
    int k = (int)fmod(fmod(q, 4.0) + 4.0, 4.0);
    cs = qc[k];
    sn = qs[k];
  } else {
    double r = deg * (3.14159265358979323846 / 180.0);
    cs = cos(r);
    sn = sin(r);
  }
  double cx = (w - 1) * 0.5, cy = (h - 1) * 0.5;
  size_t plane = (size_t)h * w;
  for (int y = 0; y < h; y++) {
    double dy = y - cy;
    for (int x = 0; x < w; x++) {
      double dx = x - cx;
      double sx = cx + dx * cs - dy * sn, sy = cy + dx * sn + dy * cs;
      double fx0 = floor(sx), fy0 = floor(sy);
      int x0 = (int)fx0, y0 = (int)fy0;
      float u = (float)(sx - fx0), v = (float)(sy - fy0);
      float wts[4] = {(1 - u) * (1 - v), u * (1 - v), (1 - u) * v, u * v};
      int64_t off[4];
      for (int k = 0; k < 4; k++) {
        int xx = x0 + (k & 1), yy = y0 + (k >> 1);
        bool inside = xx >= 0 && xx < w && yy >= 0 && yy < h;
        off[k] = inside ? (int64_t)yy * w + xx : -1;
      }
      for (int c = 0; c < C; c++) {
        const float *pl = src + c * plane;
        float acc = 0;
        for (int k = 0; k < 4; k++)
          if (off[k] >= 0) acc += wts[k] * pl[off[k]];
        dst[c * plane + (size_t)y * w + x] = acc;
      }
    }
  }
}

static void hflip(float *buf, int C, int h, int w) {
  for (int64_t r = 0; r < (int64_t)C * h; r++) {
    float *row = buf + r * w;
    for (int a = 0, b = w - 1; a < b; a++, b--) {
      float t = row[a];
      row[a] = row[b];
      row[b] = t;
    }
  }
}

/* dst = src * scale[c] + shift[c] per channel (in place allowed). */
static void affine(const float *src, float *dst, int C, size_t plane, const double *scale, const double *shift) {
  for (int c = 0; c < C; c++) {
    float a = (float)scale[c], b = (float)shift[c];
    const float *s = src + c * plane;
    float *d = dst + c * plane;
    if (a == 1.0f && b == 0.0f) {
      if (s != d) memcpy(d, s, plane * sizeof(float));
    } else {
      for (size_t i = 0; i < plane; i++) d[i] = s[i] * a + b;
    }
  }
}

void dp_img_apply(const dp_img_pipeline *p, const dp_image *img, dp_img_rng rng, dp_img_scratch *s, float *dst) {
  int C = img->channels, h = img->height, w = img->width;
  int cur = 0;
  float *buf = scratch_buf(s, cur, (size_t)C * h * w);
  size_t plane = (size_t)h * w;
  for (size_t i = 0; i < plane; i++)
    for (int c = 0; c < C; c++) buf[c * plane + i] = img->data[i * C + c];
  double scale[4] = {1, 1, 1, 1}, shift[4] = {0, 0, 0, 0}; /* the pending multiply-add */
  bool pending = false;
  for (int k = 0; k < p->n; k++) {
    const dp_img_step *st = &p->step[k];
    switch (st->op) {
    case DP_IMG_RESIZE: {
      int oh, ow;
      resize_target(st, h, w, &oh, &ow);
      if (oh == h && ow == w) break; /* bilinear at the same size samples pixel centres: identity */
      float *out = scratch_buf(s, !cur, (size_t)C * oh * ow);
      resize(s->buf[cur], out, C, h, w, oh, ow, s);
      cur = !cur;
      h = oh, w = ow, plane = (size_t)h * w;
      break;
    }
    case DP_IMG_ROTATE: {
      double deg = st->lo + (st->hi - st->lo) * step_uniform(rng, k);
      if (deg == 0) break;
      if (pending) affine(s->buf[cur], s->buf[cur], C, plane, scale, shift);
      for (int c = 0; c < C; c++) scale[c] = 1, shift[c] = 0;
      pending = false;
      float *out = scratch_buf(s, !cur, (size_t)C * plane);
      rotate(s->buf[cur], out, C, h, w, deg);
      cur = !cur;
      break;
    }
    case DP_IMG_HFLIP:
      if (step_uniform(rng, k) < st->p) hflip(s->buf[cur], C, h, w);
      break;
    case DP_IMG_TO_TENSOR:
      for (int c = 0; c < C; c++) scale[c] /= 255.0, shift[c] /= 255.0;
      pending = true;
      break;
    case DP_IMG_NORMALIZE:
      for (int c = 0; c < C; c++) {
        double m = st->mean[st->n == 1 ? 0 : c], sd = st->std[st->n == 1 ? 0 : c];
        scale[c] /= sd;
        shift[c] = (shift[c] - m) / sd;
      }
      pending = true;
      break;
    }
  }
  affine(s->buf[cur], dst, C, plane, scale, shift);
}
