/* An image dataset's C half: its items (file, label, CSV row), the compiled
 * transform pipeline, and a pool of worker threads that decode and transform
 * batches off the training thread.
 *
 * Protocol (the DataLoader's): prefetch(indices) says the next batch will be
 * these items, so the workers start on it at once; get_batch(indices) hands
 * over the prefetched batch when one matches (no copy: the workers wrote
 * into the returned tensor), else decodes now, the calling thread working
 * alongside the workers. At most DP_IMAGE_MAX_PREFETCH prefetched batches
 * are held: another prefetch drops the oldest unclaimed one.
 *
 * Randomness is per item and per load: an item's k-th load since the last
 * set_epoch uses draw k (see image_transform.h), counted on the calling
 * thread when get_batch / get_item asks for it. So results depend only on
 * the sequence of requests, never on the number of workers, on thread
 * timing, or on whether a batch was prefetched: a prefetched batch is used
 * only when its draws are the ones a synchronous load would have used.
 *
 * An item that fails (missing file, corrupt data, wrong size after the
 * transforms) fails the get_batch that needs it with a message naming the
 * CSV file, row and line and the reason; the other batches are unaffected.
 * All functions are called from one thread (the Lua state's). fork()
 * waits for the workers to finish the images in hand; a set used in the
 * child process starts workers of its own there. */
#ifndef DP_IMAGE_POOL_H
#define DP_IMAGE_POOL_H

#include <stdint.h>

#include "data/image_transform.h"
#include "tensor/tensor.h"

#define DP_IMAGE_MAX_PREFETCH 2

typedef struct dp_image_set dp_image_set;

typedef struct {
  const char *csv;          /* named in messages */
  int64_t n;                /* items */
  const char *const *paths; /* n image files (copied) */
  const int64_t *labels;    /* n 0-based class ids (batches hold them + 1) */
  const int64_t *rows;      /* n 1-based CSV data rows; row - 1 keys the item's randomness */
  const int64_t *lines;     /* n CSV file lines */
  int channels;             /* 1, 3 or 4 */
  const dp_img_pipeline *pipeline;
  uint64_t seed;
  int num_workers; /* 0: everything on the calling thread; < 0: min(4, cores) */
} dp_image_set_config;

/* Checks the pipeline; without a fixed Resize, decodes item 0 to learn the
 * batches' size (an error names its row). Starts the workers. */
dp_image_set *dp_image_set_new(const dp_image_set_config *cfg);
/* Stops the workers (each finishes the image in hand), joins them and frees
 * everything, outstanding prefetches included. NULL is fine. */
void dp_image_set_free(dp_image_set *s);

int64_t dp_image_set_len(const dp_image_set *s);
int dp_image_set_workers(const dp_image_set *s);
/* The [C, H, W] of a batch item. */
void dp_image_set_item_shape(const dp_image_set *s, int64_t shape[3]);
/* Restarts the per-item load counts under a new epoch key and drops
 * prefetched batches (their draws belong to the old epoch). */
void dp_image_set_set_epoch(dp_image_set *s, uint64_t epoch);

/* idx: n 0-based item positions. */
int dp_image_set_prefetch(dp_image_set *s, const int64_t *idx, int64_t n);
/* *x float32 [n, C, H, W], *y int64 [n] labels 1..K. */
int dp_image_set_get_batch(dp_image_set *s, const int64_t *idx, int64_t n, dp_tensor **x, dp_tensor **y);
/* One item on the calling thread: *x float32 [C, h, w] (any size), *label
 * 1..K. */
int dp_image_set_get_item(dp_image_set *s, int64_t i, dp_tensor **x, int64_t *label);

typedef struct {
  int64_t hits;      /* get_batch calls served by a prefetched batch */
  int64_t misses;    /* get_batch calls decoded on demand */
  int64_t discarded; /* prefetched batches dropped unused */
} dp_image_set_stats;
dp_image_set_stats dp_image_set_get_stats(const dp_image_set *s);
/* Items decoded and transformed by every image set of the process so far
 * (failed ones included): benchmarks and tests count work with it. */
int64_t dp_image_items_loaded(void);

#endif
