/* Minimal test macros: CHECK reports file, line and the failing expression
 * and counts failures; TEST_DONE exits non-zero if any failed. */
#ifndef DP_TEST_UTIL_H
#define DP_TEST_UTIL_H

#include <math.h>
#include <stdio.h>

static int test_failures;

#define CHECK(cond)                                                                                                    \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                         \
      test_failures++;                                                                                                 \
    }                                                                                                                  \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                                          \
  do {                                                                                                                 \
    double a_ = (a), b_ = (b);                                                                                         \
    if (!(fabs(a_ - b_) <= (tol) * (1 + fabs(b_)))) {                                                                  \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.10g, %s = %.10g\n", __FILE__, __LINE__, #a, a_, #b, b_);       \
      test_failures++;                                                                                                 \
    }                                                                                                                  \
  } while (0)

#define TEST_DONE()                                                                                                    \
  do {                                                                                                                 \
    if (test_failures) {                                                                                               \
      fprintf(stderr, "%d check(s) failed\n", test_failures);                                                          \
      return 1;                                                                                                        \
    }                                                                                                                  \
    printf("ok\n");                                                                                                    \
    return 0;                                                                                                          \
  } while (0)

#endif
