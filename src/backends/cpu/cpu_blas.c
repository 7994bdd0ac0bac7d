/* GEMM through OpenBLAS, loaded with dlopen at first use.
 *
 * Why dlopen: the runtime then starts without paying for the BLAS library
 * when a script does no matrix math, builds and runs where only
 * libblas.so.3 exists, and can set the OpenBLAS kernel choice before the
 * library initialises: DDPLUA_BLAS_CORETYPE=<name> overrides an inherited
 * OPENBLAS_CORETYPE for ddplua alone (OpenBLAS reads it once, at load). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/sgemm.h"
#include "core/error.h"

enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                         double *, int);

static struct {
  pthread_once_t once;
  void *lib;
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  void (*set_threads)(int);
  int (*get_threads)(void);
  char *(*get_config)(void);
  char *(*get_corename)(void);
  char err[256];
} blas = {.once = PTHREAD_ONCE_INIT};

static void load_blas(void) {
  const char *want = getenv("DDPLUA_BLAS_CORETYPE");
  if (want && *want) setenv("OPENBLAS_CORETYPE", want, 1);
  const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !blas.lib; i++)
    blas.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!blas.lib) {
    snprintf(blas.err, sizeof blas.err, "no BLAS library found (libopenblas.so.0): install Debian's libopenblas0 (%s)",
             dlerror());
    return;
  }
  blas.sgemm = (sgemm_fn)dlsym(blas.lib, "cblas_sgemm");
  blas.dgemm = (dgemm_fn)dlsym(blas.lib, "cblas_dgemm");
  blas.set_threads = (void (*)(int))dlsym(blas.lib, "openblas_set_num_threads");
  blas.get_threads = (int (*)(void))dlsym(blas.lib, "openblas_get_num_threads");
  blas.get_config = (char *(*)(void))dlsym(blas.lib, "openblas_get_config");
  blas.get_corename = (char *(*)(void))dlsym(blas.lib, "openblas_get_corename");
  if (!blas.sgemm || !blas.dgemm) snprintf(blas.err, sizeof blas.err, "the BLAS library has no cblas_sgemm/dgemm");
}

static int ensure_blas(void) {
  pthread_once(&blas.once, load_blas);
  if (blas.err[0]) return dp_error("%s", blas.err);
  return 0;
}

int dp_blas_set_num_threads(int n) {
  if (ensure_blas()) return -1;
  if (blas.set_threads) blas.set_threads(n);
  return 0;
}

int dp_blas_get_num_threads(void) {
  if (ensure_blas() || !blas.get_threads) return 1;
  return blas.get_threads();
}

const char *dp_blas_info(void) {
  static char buf[320];
  if (ensure_blas()) return dp_errmsg();
  snprintf(buf, sizeof buf, "%s (core %s)", blas.get_config ? blas.get_config() : "BLAS",
           blas.get_corename ? blas.get_corename() : "?");
  return buf;
}

/* float32 goes to ddplua's own GEMM (sgemm.h) unless DDPLUA_GEMM=blas or the
 * CPU has neither AVX-512 nor AVX2+FMA; float64 always to OpenBLAS. */
int dp_cpu_gemm(const dp_gemm_args *g) {
  if (g->dtype != DP_F32 && g->dtype != DP_F64)
    return dp_error("matmul on the cpu supports float32 and float64, got %s", dp_dtype_name(g->dtype));
  if (g->dtype == DP_F32) {
    dp_sgemm_impl impl;
    if (dp_sgemm_get_impl(&impl)) return -1;
    if (impl != DP_SGEMM_BLAS) return dp_sgemm_run(impl, g);
  }
  return dp_cpu_gemm_blas(g);
}

int dp_cpu_gemm_blas(const dp_gemm_args *g) {
  if (ensure_blas()) return -1;
  if (g->dtype != DP_F32 && g->dtype != DP_F64)
    return dp_error("matmul on the cpu supports float32 and float64, got %s", dp_dtype_name(g->dtype));
  if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->lda > INT32_MAX || g->ldb > INT32_MAX ||
      g->ldc > INT32_MAX)
    return dp_error("matmul dimensions exceed the BLAS 32-bit limit");
  if (g->m == 0 || g->n == 0) return 0;
  size_t es = dp_dtype_size(g->dtype);
  for (int64_t b = 0; b < g->batch; b++) {
    const char *a = (const char *)g->a + (size_t)(b * g->stride_a) * es;
    const char *bb = (const char *)g->b + (size_t)(b * g->stride_b) * es;
    char *c = (char *)g->c + (size_t)(b * g->stride_c) * es;
    if (g->k == 0) { /* BLAS leaves C untouched when k == 0 only if beta == 1 */
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
          char *e = c + (size_t)(i * g->ldc + j) * es;
          dp_store_d(e, g->dtype, g->beta == 0.0 ? 0.0 : g->beta * dp_load_d(e, g->dtype));
        }
      continue;
    }
    if (g->dtype == DP_F32)
      blas.sgemm(RowMajor, g->trans_a ? Trans : NoTrans, g->trans_b ? Trans : NoTrans, (int)g->m, (int)g->n, (int)g->k,
                 (float)g->alpha, (const float *)a, (int)g->lda, (const float *)bb, (int)g->ldb, (float)g->beta,
                 (float *)c, (int)g->ldc);
    else
      blas.dgemm(RowMajor, g->trans_a ? Trans : NoTrans, g->trans_b ? Trans : NoTrans, (int)g->m, (int)g->n, (int)g->k,
                 g->alpha, (const double *)a, (int)g->lda, (const double *)bb, (int)g->ldb, g->beta, (double *)c,
                 (int)g->ldc);
  }
  return 0;
}
