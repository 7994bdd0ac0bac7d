/* The CUDA allocator's size classes: every request fits its block, waste
 * stays under 25%, classes are monotonic and one class is one size. Pure
 * arithmetic, so it runs without a GPU. */
#include <stdlib.h>

#include "backends/cuda/cuda_size_class.h"
#include "test_util.h"

int main(void) {
  size_t class_size[DP_CU_NCLASS] = {0};
  int prev_cls = -1;
  size_t prev_n = 0;
  /* every size up to 64 KiB, then a geometric sweep with neighbours */
  for (size_t n = 1; n < ((size_t)1 << 47); n = n < 65536 ? n + 1 : n + n / 7 + 1) {
    for (size_t d = 0; d < 3; d++) {
      size_t m = n + d;
      int cls = -1;
      size_t r = dp_cu_size_class(m, &cls);
      CHECK(r >= m);
      CHECK(cls >= 0 && cls < DP_CU_NCLASS);
      if (cls < 0 || cls >= DP_CU_NCLASS) continue;
      CHECK(r == DP_CU_MIN_BLOCK || (double)(r - m) < 0.25 * (double)m);
      if (class_size[cls] == 0) class_size[cls] = r;
      CHECK(class_size[cls] == r);            /* a class is one block size */
      if (m > prev_n) CHECK(cls >= prev_cls); /* monotonic */
      prev_cls = cls, prev_n = m;
    }
  }
  int cls;
  CHECK(dp_cu_size_class(0, &cls) == DP_CU_MIN_BLOCK && cls == 0);
  CHECK(dp_cu_size_class(512, &cls) == 512 && cls == 0);
  CHECK(dp_cu_size_class(513, &cls) == 640 && cls == 1);
  CHECK(dp_cu_size_class(1024, &cls) == 1024 && cls == 4);
  CHECK(dp_cu_size_class(1025, &cls) == 1280 && cls == 5);
  CHECK(dp_cu_size_class((size_t)1 << 49, &cls) == 0);
  TEST_DONE();
}
