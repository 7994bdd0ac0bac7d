/* Image transforms, compiled from the Lua list (data.transforms) into a
 * fixed pipeline that runs in C on a decoded image:
 *   Resize          bilinear, half-pixel centres (PyTorch's
 *                   interpolate(..., align_corners=False) without antialias);
 *                   {h, w}, or one size for the smaller edge (aspect kept,
 *                   torchvision's rule for the longer edge);
 *   RandomRotation  an angle uniform in [lo, hi] degrees, counter-clockwise
 *                   about the image centre, bilinear, zero fill, same size;
 *                   multiples of 90 degrees are exact;
 *   RandomHorizontalFlip  with probability p;
 *   ToTensor        values / 255 (the image becomes float32 CHW in [0, 1]);
 *   Normalize       (x - mean[c]) / std[c], one entry or one per channel.
 * Pixels are float32 CHW from the start: geometric transforms before
 * ToTensor work on 0..255 floats, never re-rounded to bytes between steps.
 * Consecutive pointwise steps fold into one per-channel multiply-add, which
 * is carried through resizes and flips (they commute with it) and applied
 * before a rotation (whose zero fill does not) or at the end.
 *
 * Randomness: step k of item `item` in (seed, epoch, draw) uses Philox with
 * key hash(seed, epoch) and counter (draw, item, k), so an item's result
 * depends on those numbers only, never on which thread ran it or when. */
#ifndef DP_IMAGE_TRANSFORM_H
#define DP_IMAGE_TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/image_decode.h"

typedef enum { DP_IMG_RESIZE, DP_IMG_ROTATE, DP_IMG_HFLIP, DP_IMG_TO_TENSOR, DP_IMG_NORMALIZE } dp_img_op;

typedef struct {
  dp_img_op op;
  int height, width; /* resize: both > 0, or width == 0: the smaller edge becomes height */
  double lo, hi;     /* rotate: degrees */
  double p;          /* hflip: probability */
  int n;             /* normalize: entries used in mean/std (1: every channel) */
  double mean[4], std[4];
} dp_img_step;

#define DP_IMG_MAX_STEPS 16
typedef struct {
  int n;
  dp_img_step step[DP_IMG_MAX_STEPS];
} dp_img_pipeline;

const char *dp_img_step_name(dp_img_op op);
/* Checks the steps' parameters and order for images of `channels`:
 * at most one ToTensor (exactly one when require_to_tensor), Normalize only
 * after it, Normalize's lengths 1 or channels, non-zero stds. Errors name
 * the transform's 1-based position and name. */
int dp_img_pipeline_check(const dp_img_pipeline *p, int channels, bool require_to_tensor);
/* The size the pipeline produces from an in_h x in_w image. */
void dp_img_output_size(const dp_img_pipeline *p, int in_h, int in_w, int *out_h, int *out_w);
/* True when the output size does not depend on the input (a fixed Resize
 * comes after every smaller-edge Resize); then *h, *w are that size. */
bool dp_img_fixed_size(const dp_img_pipeline *p, int *h, int *w);

typedef struct {
  uint64_t key, base;
} dp_img_rng;
/* item < 2^36, draw < 2^24 (both far beyond any dataset). */
dp_img_rng dp_img_rng_for(uint64_t seed, uint64_t epoch, uint64_t draw, uint64_t item);

/* Per-thread buffers, grown as needed and reused across images. */
typedef struct {
  float *buf[2];
  size_t cap[2];
  int32_t *idx;
  float *wt;
  size_t tcap;
} dp_img_scratch;
void dp_img_scratch_free(dp_img_scratch *s);

/* Runs p on img (uint8 HWC) and writes img->channels x out_h x out_w floats
 * (CHW, dp_img_output_size) to dst. */
void dp_img_apply(const dp_img_pipeline *p, const dp_image *img, dp_img_rng rng, dp_img_scratch *s, float *dst);

#endif
