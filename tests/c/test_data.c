/* Batch gathering and the IDX reader at the C level: every dtype path of
 * dp_gather_rows against values computed here, strided sources, index
 * errors, and an IDX round trip through a gzip'd file written with zlib. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"
#include "data/gather.h"
#include "data/idx.h"
#include "ops/ops.h"
#include "test_util.h"

static void test_gather_paths(void) {
  /* src [4, 3] uint8: value 10 * row + col */
  int64_t shape[2] = {4, 3};
  dp_tensor *u8 = dp_empty(DP_U8, 2, shape, dp_cpu());
  uint8_t *up = dp_data(u8);
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 3; c++) up[r * 3 + c] = (uint8_t)(10 * r + c);
  const int64_t idx[3] = {4, 1, 4}; /* 1-based */

  dp_tensor *f = dp_gather_rows(u8, idx, 3, 1, DP_F32, 255); /* the uint8 -> float32 fast path */
  CHECK(f && f->ndim == 2 && f->shape[0] == 3 && f->shape[1] == 3 && f->dtype == DP_F32);
  const float *fp = dp_data(f);
  CHECK(fp[0] == 30.f / 255.f && fp[2] == 32.f / 255.f && fp[3] == 0.f && fp[5] == 2.f / 255.f);
  CHECK(fp[8] == 32.f / 255.f);

  dp_tensor *same = dp_gather_rows(u8, idx, 3, 1, DP_U8, 1); /* same dtype: row copies */
  const uint8_t *sp = dp_data(same);
  CHECK(sp[0] == 30 && sp[4] == 1 && sp[8] == 32);

  dp_tensor *d = dp_gather_rows(u8, idx, 3, 1, DP_F64, 2); /* the generic double path */
  const double *dd = dp_data(d);
  CHECK(d->dtype == DP_F64 && dd[1] == 15.5 && dd[3] == 0.0 && dd[7] == 15.5);

  dp_tensor *i64 = dp_gather_rows(u8, (const int64_t[]){2}, 1, 1, DP_I64, 1);
  CHECK(((const int64_t *)dp_data(i64))[2] == 12);

  /* a transposed (non-contiguous) float source gathers its logical rows */
  dp_tensor *ff = dp_to(u8, DP_F32, dp_cpu());
  dp_tensor *t = dp_transpose(ff, 0, 1); /* [3, 4]: row k = column k of u8 */
  dp_tensor *tr = dp_gather_rows(t, (const int64_t[]){2}, 1, 1, DP_F32, 1);
  const float *tp = dp_data(tr);
  CHECK(tr->shape[0] == 1 && tr->shape[1] == 4 && tp[0] == 1.f && tp[1] == 11.f && tp[3] == 31.f);

  /* 0-based indices work too (base 0) */
  dp_tensor *z = dp_gather_rows(u8, (const int64_t[]){0}, 1, 0, DP_U8, 1);
  CHECK(((const uint8_t *)dp_data(z))[1] == 1);

  dp_tensor *bad = dp_gather_rows(u8, (const int64_t[]){1, 5}, 2, 1, DP_F32, 1);
  CHECK(bad == NULL && strstr(dp_errmsg(), "index 5 at batch position 2 is out of range 1..4"));
  bad = dp_gather_rows(u8, idx, 3, 1, DP_I64, 255);
  CHECK(bad == NULL && strstr(dp_errmsg(), "needs a floating point output dtype"));
  dp_tensor *scalar = dp_scalar(1, DP_F32, dp_cpu());
  bad = dp_gather_rows(scalar, idx, 1, 1, DP_F32, 1);
  CHECK(bad == NULL && strstr(dp_errmsg(), "0-dimensional"));

  dp_tensor *all[] = {u8, f, same, d, i64, ff, t, tr, z, scalar};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) dp_release(all[k]);
}

static void test_idx_gzip_round_trip(void) {
  char path[] = "/tmp/ddplua_idx_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  gzFile g = gzopen(path, "wb");
  const unsigned char head[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  const unsigned char body[] = {1, 2, 3, 4, 5, 255};
  gzwrite(g, head, sizeof head);
  gzwrite(g, body, sizeof body);
  gzclose(g);
  dp_tensor *t = dp_idx_load(path);
  CHECK(t && t->dtype == DP_U8 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
  if (t) CHECK(memcmp(dp_data(t), body, sizeof body) == 0);
  dp_release(t);
  unlink(path);
  t = dp_idx_load(path);
  CHECK(t == NULL && strstr(dp_errmsg(), "cannot open") && strstr(dp_errmsg(), path));
}

int main(void) {
  test_gather_paths();
  test_idx_gzip_round_trip();
  TEST_DONE();
}
