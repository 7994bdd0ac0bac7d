/* The image dataset's worker pool: batches identical whatever the number of
 * workers (random transforms included), prefetched batches identical to
 * synchronous ones and used only when they match, at most two held, errors
 * reported by the get_batch that needs the item and naming its CSV row,
 * and shutdown with work outstanding (run under ASan/LSan in the sanitizer
 * build, which also checks nothing leaks). */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "data/image_decode.h"
#include "data/image_pool.h"
#include "test_util.h"

enum { N = 24, SIDE = 20 };
static char dir[64];
static char *paths[N];
static int64_t labels[N], rows[N], lines[N];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void make_files(void) {
  for (int i = 0; i < N; i++) {
    char name[128];
    /* item 5 is missing, item 7 is not an image, item 9 has another size */
    snprintf(name, sizeof name, "%s/img%02d.%s", dir, i, i % 3 ? "png" : "jpg");
    paths[i] = strdup(name);
    labels[i] = i % 4;
    rows[i] = i + 1;
    lines[i] = i + 2;
    /* items 22 and 23 are large, noisy images: each takes a while to decode */
    int side = i == 9 ? SIDE + 3 : i >= 22 ? 1024 : SIDE;
    dp_image img = {side, side, 3, malloc((size_t)side * side * 3)};
    for (uint32_t k = 0; k < (uint32_t)(side * side * 3); k++)
      img.data[k] = i >= 22 ? (uint8_t)((k * 2654435761u) >> 23) : (uint8_t)(k * (uint32_t)(i + 3) + (uint32_t)i * 17);
    if (i == 7) {
      FILE *f = fopen(name, "wb");
      fputs("not an image", f);
      fclose(f);
    } else if (i % 3 && i != 5) {
      CHECK(dp_image_write_png(name, &img) == 0);
    } else if (i != 5) {
      CHECK(dp_image_write_jpeg(name, &img, 90) == 0);
    }
    free(img.data);
  }
}

static dp_img_pipeline augment(void) {
  dp_img_pipeline p = {.n = 5};
  p.step[0] = (dp_img_step){.op = DP_IMG_RESIZE, .height = 16, .width = 12};
  p.step[1] = (dp_img_step){.op = DP_IMG_ROTATE, .lo = -30, .hi = 30};
  p.step[2] = (dp_img_step){.op = DP_IMG_HFLIP, .p = 0.5};
  p.step[3] = (dp_img_step){.op = DP_IMG_TO_TENSOR};
  p.step[4] = (dp_img_step){.op = DP_IMG_NORMALIZE, .n = 3, .mean = {0.4, 0.5, 0.6}, .std = {0.2, 0.25, 0.3}};
  return p;
}

static dp_image_set *open_set(int workers, const dp_img_pipeline *p) {
  dp_image_set_config cfg = {.csv = "list.csv",
                             .n = N,
                             .paths = (const char *const *)paths,
                             .labels = labels,
                             .rows = rows,
                             .lines = lines,
                             .channels = 3,
                             .pipeline = p,
                             .seed = 42,
                             .num_workers = workers};
  dp_image_set *s = dp_image_set_new(&cfg);
  CHECK(s != NULL);
  return s;
}

static const int64_t good[3][6] = {{0, 1, 2, 3, 4, 6}, {8, 10, 11, 1, 0, 12}, {13, 14, 15, 16, 17, 1}};

static bool same(dp_tensor *a, dp_tensor *b) {
  return a && b && dp_numel(a) == dp_numel(b) && memcmp(dp_data(a), dp_data(b), (size_t)dp_numel(a) * 4) == 0;
}

/* Loads the three good batches twice over (so draws 0 and 1 of the items). */
static void load_all(dp_image_set *s, dp_tensor *out[6], bool prefetch) {
  for (int k = 0; k < 6; k++) {
    if (prefetch && k == 0) CHECK(dp_image_set_prefetch(s, good[0], 6) == 0);
    if (prefetch && k + 1 < 6) CHECK(dp_image_set_prefetch(s, good[(k + 1) % 3], 6) == 0);
    dp_tensor *y;
    CHECK(dp_image_set_get_batch(s, good[k % 3], 6, &out[k], &y) == 0);
    if (y) {
      int64_t *lp = dp_data(y);
      for (int p = 0; p < 6; p++) CHECK(lp[p] == labels[good[k % 3][p]] + 1);
    }
    dp_release(y);
  }
}

static void test_determinism(void) {
  dp_img_pipeline p = augment();
  dp_tensor *ref[6], *got[6];
  dp_image_set *s0 = open_set(0, &p);
  load_all(s0, ref, false);
  /* repeated loads of an item draw new transforms; batch 4 repeats batch 1 */
  CHECK(!same(ref[0], ref[3]));
  int64_t shape[3];
  dp_image_set_item_shape(s0, shape);
  CHECK(shape[0] == 3 && shape[1] == 16 && shape[2] == 12);
  dp_image_set_free(s0);
  for (int workers = 1; workers <= 3; workers += 2)
    for (int pre = 0; pre < 2; pre++) {
      dp_image_set *s = open_set(workers, &p);
      load_all(s, got, pre);
      for (int k = 0; k < 6; k++) {
        CHECK(same(ref[k], got[k]));
        dp_release(got[k]);
      }
      dp_image_set_stats st = dp_image_set_get_stats(s);
      if (pre) CHECK(st.hits == 6 && st.misses == 0 && st.discarded == 0);
      else CHECK(st.hits == 0 && st.misses == 6);
      dp_image_set_free(s);
    }
  /* a new epoch restarts the draws under another key, and replays exactly */
  dp_image_set *s = open_set(2, &p);
  dp_image_set_set_epoch(s, 3);
  load_all(s, got, true);
  CHECK(!same(ref[0], got[0]));
  dp_tensor *again[6];
  dp_image_set_set_epoch(s, 3);
  load_all(s, again, false);
  for (int k = 0; k < 6; k++) {
    CHECK(same(again[k], got[k]));
    dp_release(again[k]);
    dp_release(got[k]);
  }
  dp_image_set_free(s);
  for (int k = 0; k < 6; k++) dp_release(ref[k]);
}

/* Prefetches that are never claimed, claimed out of order, or made stale by
 * a load of the same items in between never change what get_batch returns. */
static void test_mismatched_prefetch(void) {
  dp_img_pipeline p = augment();
  dp_image_set *s0 = open_set(0, &p), *s = open_set(2, &p);
  unsigned seed = 7;
  for (int step = 0; step < 40; step++) {
    int a = rand_r(&seed) % 3, b = rand_r(&seed) % 3;
    CHECK(dp_image_set_prefetch(s, good[a], 6) == 0);
    if (rand_r(&seed) % 2) CHECK(dp_image_set_prefetch(s, good[b], 6) == 0);
    if (rand_r(&seed) % 4 == 0) CHECK(dp_image_set_prefetch(s, good[(a + 1) % 3], 6) == 0);
    int want = rand_r(&seed) % 3;
    dp_tensor *x0, *y0, *x, *y;
    CHECK(dp_image_set_prefetch(s0, good[want], 6) == 0); /* a no-op without workers */
    CHECK(dp_image_set_get_batch(s0, good[want], 6, &x0, &y0) == 0);
    CHECK(dp_image_set_get_batch(s, good[want], 6, &x, &y) == 0);
    CHECK(same(x0, x));
    dp_release(x0), dp_release(y0), dp_release(x), dp_release(y);
  }
  dp_image_set_stats st = dp_image_set_get_stats(s);
  CHECK(st.hits > 0 && st.misses > 0 && st.discarded > 0);
  CHECK(st.hits + st.misses == 40);
  /* items load one at a time too, with the same draws as in batches */
  dp_tensor *x, *x0, *y0;
  int64_t label;
  CHECK(dp_image_set_get_item(s, 4, &x, &label) == 0 && label == labels[4] + 1);
  int64_t one = 4;
  CHECK(dp_image_set_get_batch(s0, &one, 1, &x0, &y0) == 0);
  CHECK(same(x, x0));
  dp_release(x), dp_release(x0), dp_release(y0);
  dp_image_set_free(s0);
  dp_image_set_free(s);
}

static void expect_batch_error(dp_image_set *s, const int64_t *idx, int n, bool prefetch, const char *part) {
  if (prefetch) CHECK(dp_image_set_prefetch(s, idx, n) == 0); /* queued fine: the error waits for get_batch */
  dp_tensor *x, *y;
  CHECK(dp_image_set_get_batch(s, idx, n, &x, &y) == -1);
  CHECK(x == NULL && y == NULL);
  const char *m = dp_errmsg();
  if (!strstr(m, part) || !strstr(m, "list.csv: row ")) {
    fprintf(stderr, "  message '%s' lacks '%s'\n", m, part);
    test_failures++;
  }
}

static void test_errors(void) {
  dp_img_pipeline p = augment();
  for (int workers = 0; workers <= 2; workers += 2) {
    dp_image_set *s = open_set(workers, &p);
    int64_t missing[] = {0, 1, 5, 2}, junk[] = {7, 1}, both[] = {1, 7, 5}, resized[] = {9, 0};
    expect_batch_error(s, missing, 4, workers > 0, "row 6 (line 7): image '");
    expect_batch_error(s, missing, 4, false, "img05.png': cannot open: No such file");
    expect_batch_error(s, junk, 2, workers > 0, "row 8 (line 9): image '");
    expect_batch_error(s, junk, 2, false, "unsupported format");
    /* the first failing position is reported */
    expect_batch_error(s, both, 3, workers > 0, "row 8 (line 9)");
    int64_t out_of_range[] = {1, N};
    dp_tensor *x, *y;
    CHECK(dp_image_set_get_batch(s, out_of_range, 2, &x, &y) == -1);
    CHECK(strstr(dp_errmsg(), "index 25 (position 2 of the indices) is out of range 1..24") != NULL);
    CHECK(dp_image_set_prefetch(s, out_of_range, 2) == -1);
    /* the failures leave the set working; the fixed Resize makes the larger
     * item 10 fit */
    CHECK(dp_image_set_get_batch(s, good[1], 6, &x, &y) == 0);
    dp_release(x), dp_release(y);
    CHECK(dp_image_set_get_batch(s, resized, 2, &x, &y) == 0);
    dp_release(x), dp_release(y);
    dp_image_set_free(s);
  }
  /* without a fixed Resize the first item's size is the batch size */
  dp_img_pipeline plain = {.n = 1, .step = {{.op = DP_IMG_TO_TENSOR}}};
  dp_image_set *s = open_set(1, &plain);
  int64_t shape[3];
  dp_image_set_item_shape(s, shape);
  CHECK(shape[1] == SIDE && shape[2] == SIDE);
  int64_t odd[] = {0, 9};
  expect_batch_error(s, odd, 2, true, "is 23x23 (HxW) after the transforms but this dataset's items are 20x20");
  dp_image_set_free(s);
}

/* Closing with full prefetch queues stops once each worker has finished
 * the image in hand, without decoding the queued batches, and frees
 * everything (LSan checks that in the sanitizer build). */
static void test_shutdown(void) {
  dp_img_pipeline p = augment();
  int64_t many[64]; /* the large items: the queue holds seconds of work */
  for (int k = 0; k < 64; k++) many[k] = 22 + k % 2;
  for (int round = 0; round < 2; round++) {
    dp_image_set *s = open_set(3, &p);
    int64_t before = dp_image_items_loaded();
    CHECK(dp_image_set_prefetch(s, many, 64) == 0);
    CHECK(dp_image_set_prefetch(s, many + 1, 63) == 0);
    CHECK(dp_image_set_prefetch(s, many + 2, 62) == 0); /* drops the first */
    if (round == 1) {                                   /* an error waiting in a queued batch goes with it */
      int64_t bad[] = {5, 0};
      CHECK(dp_image_set_prefetch(s, bad, 2) == 0);
    }
    dp_image_set_free(s);
    int64_t loaded = dp_image_items_loaded() - before;
    CHECK(loaded < 63 + 62);
  }
}

/* fork() while the workers are busy: the fork waits for the images in
 * hand (so no worker is inside malloc or a decoder when the process is
 * copied), the child gets a working set with workers of its own instead of
 * locks held by threads that do not exist there, and the parent's set goes
 * on unaffected. */
static void test_fork(void) {
  dp_img_pipeline p = augment();
  int64_t heavy[8] = {22, 23, 22, 23, 22, 23, 22, 23};
  dp_image_set *s0 = open_set(0, &p);
  dp_tensor *ref, *y;
  CHECK(dp_image_set_get_batch(s0, heavy, 8, &ref, &y) == 0);
  dp_release(y);
  dp_image_set_free(s0);
  dp_image_set *s = open_set(2, &p);
  int64_t before = dp_image_items_loaded();
  CHECK(dp_image_set_prefetch(s, heavy, 8) == 0);
  /* fork once both workers are inside items of it (each takes ~30 ms; 6 more wait) */
  while (dp_image_items_loaded() - before < 2) usleep(1000);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a hang becomes a failure */
    dp_tensor *x;
    int ok = dp_image_set_get_batch(s, heavy, 8, &x, &y) == 0 && same(ref, x) && dp_image_set_workers(s) == 2;
    if (ok) dp_release(x), dp_release(y);
    /* and the child's own workers decode a prefetch in the background */
    int64_t start = dp_image_items_loaded();
    ok = ok && dp_image_set_prefetch(s, good[1], 6) == 0;
    for (int waited = 0; ok && dp_image_items_loaded() - start < 6 && waited < 10000; waited++) usleep(1000);
    ok = ok && dp_image_items_loaded() - start == 6;
    dp_image_set_free(s);
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  dp_tensor *x;
  CHECK(dp_image_set_get_batch(s, heavy, 8, &x, &y) == 0);
  CHECK(same(ref, x));
  CHECK(dp_image_set_get_stats(s).hits == 1);
  dp_release(x), dp_release(y), dp_release(ref);
  dp_image_set_free(s);
}

int main(void) {
  strcpy(dir, "/tmp/ddplua_test_pool_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  make_files();
  test_determinism();
  test_mismatched_prefetch();
  test_errors();
  test_shutdown();
  test_fork();
  for (int i = 0; i < N; i++) free(paths[i]);
  nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  TEST_DONE();
}
