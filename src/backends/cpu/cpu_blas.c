/* GEMM through OpenBLAS, loaded with dlopen at first use, or through a plain
 * loop where no BLAS library can be loaded.
 *
 * Why dlopen: the runtime then starts without paying for the BLAS library
 * when a script does no matrix math, builds and runs where only
 * libblas.so.3 exists, and can set the OpenBLAS kernel choice before the
 * library initialises: DDPLUA_BLAS_CORETYPE=<name> overrides an inherited
 * OPENBLAS_CORETYPE for ddplua alone (OpenBLAS reads it once, at load).
 * DDPLUA_BLAS=<library> loads that library instead of the default list;
 * DDPLUA_BLAS=none loads none.
 *
 * Without a BLAS library (a machine that has none, such as a GPU image, or
 * DDPLUA_BLAS=none) the float64 GEMM and the "blas" float32 path run a
 * plain loop with the same contract (dp_gemm_args, backend.h), accumulating
 * in float64: slow for large matrices, but it keeps float64 reference math
 * and every CPU op working; dp_blas_info() says so. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backends/cpu/cpu_dnnl.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_vec.h"
#include "backends/cpu/sgemm.h"
#include "core/error.h"
#include "tensor/storage.h"

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
  char err[256];    /* a BLAS library was loaded but is unusable */
  char absent[320]; /* no BLAS library: the plain loop runs (why) */
  int threads;      /* what set_num_threads asked for, 0: not asked (under blas_lock) */
} blas = {.once = PTHREAD_ONCE_INIT, .threads = 0};

/* OpenBLAS and an address-space limit (RLIMIT_AS, `ulimit -v`). Every
 * OpenBLAS thread takes a 128 MiB work buffer and keeps it: a worker as soon
 * as it starts (at load, and when openblas_set_num_threads adds threads),
 * the calling thread at its first GEMM. When that allocation fails,
 * OpenBLAS 0.3.21 retries forever: the matmul never returns, and exit,
 * which joins the workers, never finishes. So under a finite limit the
 * buffers are mapped once as a probe before OpenBLAS would take them
 * (PROT_NONE counts against the limit as the real buffer will): OpenBLAS is
 * given one thread (no workers: a worker takes its buffer on its own
 * thread, at a moment nothing here can order against the probes, and a
 * probe racing it made it fail), and when the calling thread's buffer does
 * not fit, the plain loop (gemm_loop) computes the product, slowly, never
 * stuck. Without a limit nothing is probed and OpenBLAS gets its threads. */
enum { BLAS_BUFFER_PROBE = 160 << 20 }; /* the calling thread's 128 MiB buffer, its guard pages, a margin */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static bool blas_main_held; /* a GEMM has run: the calling thread's buffer exists (atomic) */

static bool address_space_limited(void) {
  struct rlimit rl;
  return getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

static bool address_space_fits(size_t buffers) {
  if (buffers == 0) return true;
  size_t bytes = buffers * (size_t)BLAS_BUFFER_PROBE;
  void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  munmap(p, bytes);
  return true;
}

/* The threads OpenBLAS may run, up to `want`: one under an address-space
 * limit (see above). */
static int blas_threads_allowed(int want) {
  if (want < 1) want = 1;
  return address_space_limited() ? 1 : want;
}

/* What set_num_threads' n gives OpenBLAS: at most one thread per online
 * core (more only contend), one under an address-space limit. */
static int blas_threads_for(int n) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return blas_threads_allowed(cores >= 1 && n > cores ? (int)cores : n);
}

/* Under blas_lock: whether load_blas has finished (set_num_threads before it
 * only records the count, which load_blas starts OpenBLAS with: a script
 * that sets threads and never multiplies float64 matrices loads no BLAS). */
static bool blas_loaded;

/* The thread count OpenBLAS starts with at load: what it reads from the
 * environment (in its order), else one per online core. */
static int blas_start_threads(void) {
  const char *vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores >= 1 ? (int)cores : 1;
}

static void load_blas(void) {
  const char *want = getenv("DDPLUA_BLAS_CORETYPE");
  if (want && *want) setenv("OPENBLAS_CORETYPE", want, 1);
  const char *only = getenv("DDPLUA_BLAS");
  const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  const char *last = "DDPLUA_BLAS=none";
  pthread_mutex_lock(&blas_lock);
  int asked = blas.threads;
  pthread_mutex_unlock(&blas_lock);
  /* OpenBLAS starts its workers as it loads, from OPENBLAS_NUM_THREADS:
   * set it for the load alone when ddplua asks for another count, so no
   * worker starts only to idle (a spinning worker slows the other core) */
  int start = blas_start_threads(), threads = asked ? blas_threads_for(asked) : blas_threads_allowed(start);
  const char *env = getenv("OPENBLAS_NUM_THREADS");
  char saved[32] = "", n[16];
  bool had = env != NULL, swap = threads != start;
  if (had) snprintf(saved, sizeof saved, "%s", env);
  if (swap) {
    snprintf(n, sizeof n, "%d", threads);
    setenv("OPENBLAS_NUM_THREADS", n, 1);
  }
  if (only && *only) {
    if (strcmp(only, "none") != 0) blas.lib = dlopen(only, RTLD_NOW | RTLD_LOCAL);
    if (!blas.lib && strcmp(only, "none") != 0) last = dlerror();
  } else {
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !blas.lib; i++) {
      blas.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
      if (!blas.lib && i == 0) last = dlerror();
    }
  }
  if (swap && had) setenv("OPENBLAS_NUM_THREADS", saved, 1);
  if (swap && !had) unsetenv("OPENBLAS_NUM_THREADS");
  if (!blas.lib) {
    snprintf(blas.absent, sizeof blas.absent,
             "no BLAS library (%.200s): float64 matmuls use a plain loop (install Debian's libopenblas0 for speed)",
             last ? last : "not found");
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

static void load_blas_once(void) {
  load_blas();
  pthread_mutex_lock(&blas_lock);
  blas_loaded = true;
  int asked = blas.threads; /* set_num_threads may have run during the load */
  if (asked && blas.lib && blas.set_threads) blas.set_threads(blas_threads_for(asked));
  pthread_mutex_unlock(&blas_lock);
}

static int ensure_blas(void) {
  pthread_once(&blas.once, load_blas_once);
  if (blas.err[0]) return dp_error("%s", blas.err);
  return 0;
}

/* The threads OpenBLAS is given (blas_threads_for); before the first GEMM
 * that needs OpenBLAS only recorded. */
int dp_blas_set_num_threads(int n) {
  pthread_mutex_lock(&blas_lock);
  blas.threads = n < 1 ? 1 : n;
  bool loaded = blas_loaded;
  if (loaded && blas.lib && blas.set_threads) blas.set_threads(blas_threads_for(blas.threads));
  pthread_mutex_unlock(&blas_lock);
  return 0;
}

/* Whether the calling thread's buffer is there or fits (see above). */
static bool blas_call_fits(void) {
  if (__atomic_load_n(&blas_main_held, __ATOMIC_ACQUIRE)) return true;
  pthread_mutex_lock(&blas_lock);
  bool fits = blas_main_held || !address_space_limited() || address_space_fits(1);
  pthread_mutex_unlock(&blas_lock);
  return fits;
}

int dp_blas_get_num_threads(void) {
  pthread_mutex_lock(&blas_lock);
  int asked = blas.threads;
  pthread_mutex_unlock(&blas_lock);
  if (asked) return asked; /* what was asked for, as PyTorch reports it */
  if (ensure_blas()) return 1;
  if (!blas.lib) return 1;
  return blas.get_threads ? blas.get_threads() : 1;
}

const char *dp_blas_info(void) {
  static char buf[320];
  if (ensure_blas()) return dp_errmsg();
  if (!blas.lib) return blas.absent;
  snprintf(buf, sizeof buf, "%s (core %s)", blas.get_config ? blas.get_config() : "BLAS",
           blas.get_corename ? blas.get_corename() : "?");
  return buf;
}

/* One operand of a bfloat16 GEMM as a dense float32 copy: the rows x cols
 * rectangle it covers with row stride ld, per batch item (batch stride 0:
 * once). */
typedef struct {
  float *p;
  size_t bytes;
  int64_t stride;
} f32_copy;

static int to_f32(f32_copy *c, const void *src, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  int64_t items = stride == 0 ? 1 : batch;
  c->stride = stride == 0 ? 0 : rows * cols;
  c->bytes = (size_t)(items * rows * cols) * sizeof(float);
  if (!(c->p = dp_cpu_alloc(c->bytes ? c->bytes : 4))) return dp_error("matmul: out of memory for bfloat16 operands");
  const dp_cpu_vec *v = dp_cpu_vec_get();
  for (int64_t b = 0; b < items; b++)
    for (int64_t r = 0; r < rows; r++)
      v->cast(c->p + b * c->stride + r * cols, DP_F32, (const uint16_t *)src + b * stride + r * ld, DP_BF16, cols);
  return 0;
}

/* bfloat16: oneDNN where the CPU computes bfloat16 natively (AMX,
 * AVX512-BF16); elsewhere the operands widened to float32 (exactly: a
 * bfloat16 is the top half of a float32), ddplua's float32 GEMM, and the
 * result rounded to bfloat16 once, which is what a float32-accumulating
 * bfloat16 GEMM computes. */
static int gemm_bf16(const dp_gemm_args *g, const uint16_t *bias) {
  if (dp_cpu_native_bf16()) {
    int r = dp_dnnl_gemm_bf16(g, bias);
    if (r) return r < 0 ? -1 : 0;
  }
  if (g->m <= 0 || g->n <= 0 || g->batch <= 0) return 0;
  int64_t ar = g->trans_a ? g->k : g->m, ac = g->trans_a ? g->m : g->k;
  int64_t br = g->trans_b ? g->n : g->k, bc = g->trans_b ? g->k : g->n;
  f32_copy A = {0}, B = {0}, C = {0};
  int rc = to_f32(&A, g->a, ar, ac, g->lda, g->stride_a, g->batch);
  if (!rc) rc = to_f32(&B, g->b, br, bc, g->ldb, g->stride_b, g->batch);
  if (!rc && g->beta != 0.0) rc = to_f32(&C, g->c, g->m, g->n, g->ldc, g->stride_c, g->batch);
  if (!rc && g->beta == 0.0) {
    C.stride = g->m * g->n;
    C.bytes = (size_t)(g->batch * g->m * g->n) * sizeof(float);
    if (!(C.p = dp_cpu_alloc(C.bytes))) rc = dp_error("matmul: out of memory for a bfloat16 result");
  }
  if (!rc) {
    dp_gemm_args f = *g;
    f.dtype = DP_F32;
    f.a = A.p, f.lda = ac, f.stride_a = A.stride;
    f.b = B.p, f.ldb = bc, f.stride_b = B.stride;
    f.c = C.p, f.ldc = g->n, f.stride_c = C.stride;
    rc = dp_cpu_gemm(&f);
  }
  if (!rc) {
    const dp_cpu_vec *v = dp_cpu_vec_get();
    for (int64_t b = 0; b < g->batch; b++)
      for (int64_t r = 0; r < g->m; r++) {
        float *row = C.p + b * C.stride + r * g->n;
        for (int64_t j = 0; bias && j < g->n; j++) row[j] += dp_bf16_to_f32(bias[j]);
        v->cast((uint16_t *)g->c + b * g->stride_c + r * g->ldc, DP_BF16, row, DP_F32, g->n);
      }
  }
  if (A.p) dp_cpu_free(A.p, A.bytes ? A.bytes : 4);
  if (B.p) dp_cpu_free(B.p, B.bytes ? B.bytes : 4);
  if (C.p) dp_cpu_free(C.p, C.bytes ? C.bytes : 4);
  return rc;
}

/* float32 goes to ddplua's own GEMM (sgemm.h) unless DDPLUA_GEMM=blas or the
 * CPU has neither AVX-512 nor AVX2+FMA; float64 always to OpenBLAS (or the
 * plain loop without it); bfloat16 (autocast) through float32 or oneDNN. */
/* Integer GEMM (PyTorch multiplies int64 and uint8 matrices on the CPU):
 * exact, wrapping like the elementwise integer ops (uint8 modulo 256);
 * alpha and beta are whole numbers here (the op layer passes 1 and 0/1). */
static void gemm_int_loop(const dp_gemm_args *g) {
  size_t es = dp_dtype_size(g->dtype);
  uint64_t alpha = (uint64_t)(int64_t)g->alpha, beta = (uint64_t)(int64_t)g->beta;
  int64_t ai = g->trans_a ? 1 : g->lda, ak = g->trans_a ? g->lda : 1;
  int64_t bk = g->trans_b ? 1 : g->ldb, bj = g->trans_b ? g->ldb : 1;
  for (int64_t b = 0; b < g->batch; b++) {
    const char *a = (const char *)g->a + (size_t)(b * g->stride_a) * es;
    const char *bb = (const char *)g->b + (size_t)(b * g->stride_b) * es;
    char *c = (char *)g->c + (size_t)(b * g->stride_c) * es;
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < g->k; k++) {
          int64_t ia = (i * ai + k * ak), ib = (k * bk + j * bj);
          uint64_t x = g->dtype == DP_I64 ? (uint64_t)((const int64_t *)a)[ia] : ((const uint8_t *)a)[ia];
          uint64_t y = g->dtype == DP_I64 ? (uint64_t)((const int64_t *)bb)[ib] : ((const uint8_t *)bb)[ib];
          acc += x * y;
        }
        int64_t e = i * g->ldc + j;
        if (g->dtype == DP_I64) {
          int64_t *pc = (int64_t *)c + e;
          *pc = (int64_t)(alpha * acc + (beta ? beta * (uint64_t)*pc : 0));
        } else {
          uint8_t *pc = (uint8_t *)c + e;
          *pc = (uint8_t)(alpha * acc + (beta ? beta * (uint64_t)*pc : 0));
        }
      }
  }
}

int dp_cpu_gemm(const dp_gemm_args *g) {
  if (g->dtype == DP_BF16) return gemm_bf16(g, NULL);
  if (g->dtype == DP_I64 || g->dtype == DP_U8) {
    gemm_int_loop(g);
    return 0;
  }
  if (g->dtype != DP_F32 && g->dtype != DP_F64)
    return dp_error("matmul on the cpu supports float32, float64, bfloat16, int64 and uint8, got %s",
                    dp_dtype_name(g->dtype));
  if (g->dtype == DP_F32) {
    dp_sgemm_impl impl;
    if (dp_sgemm_get_impl(&impl)) return -1;
    if (impl != DP_SGEMM_BLAS) return dp_sgemm_run(impl, g);
  }
  return dp_cpu_gemm_blas(g);
}

int dp_cpu_gemm_bias(const dp_gemm_args *g, const void *bias) {
  if (g->dtype == DP_F32) {
    dp_sgemm_impl impl;
    if (dp_sgemm_get_impl(&impl)) return -1;
    if (impl != DP_SGEMM_BLAS) return dp_sgemm_run_bias(impl, g, bias);
  }
  if (g->dtype == DP_BF16) return gemm_bf16(g, bias); /* bias added before the one rounding */
  if (dp_cpu_gemm(g)) return -1;
  size_t es = dp_dtype_size(g->dtype);
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t i = 0; i < g->m; i++) {
      char *row = (char *)g->c + (size_t)(b * g->stride_c + i * g->ldc) * es;
      for (int64_t j = 0; j < g->n; j++)
        dp_store_d(row + (size_t)j * es, g->dtype,
                   dp_load_d(row + (size_t)j * es, g->dtype) +
                       dp_load_d((const char *)bias + (size_t)j * es, g->dtype));
    }
  return 0;
}

/* The contract of dp_gemm_args without BLAS: each C element is one float64
 * dot product (beta == 0 ignores C's old value, NaN included, as BLAS
 * does). */
static void gemm_loop(const dp_gemm_args *g) {
  size_t es = dp_dtype_size(g->dtype);
  for (int64_t b = 0; b < g->batch; b++) {
    const char *a = (const char *)g->a + (size_t)(b * g->stride_a) * es;
    const char *bb = (const char *)g->b + (size_t)(b * g->stride_b) * es;
    char *c = (char *)g->c + (size_t)(b * g->stride_c) * es;
    /* element strides of op(A) along (i, k) and of op(B) along (k, j) */
    int64_t ai = g->trans_a ? 1 : g->lda, ak = g->trans_a ? g->lda : 1;
    int64_t bk = g->trans_b ? 1 : g->ldb, bj = g->trans_b ? g->ldb : 1;
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        double acc = 0;
        if (g->dtype == DP_F64) {
          const double *pa = (const double *)a + i * ai, *pb = (const double *)bb + j * bj;
          for (int64_t k = 0; k < g->k; k++) acc += pa[k * ak] * pb[k * bk];
        } else {
          const float *pa = (const float *)a + i * ai, *pb = (const float *)bb + j * bj;
          for (int64_t k = 0; k < g->k; k++) acc += (double)pa[k * ak] * (double)pb[k * bk];
        }
        char *e = c + (size_t)(i * g->ldc + j) * es;
        double v = g->alpha * acc + (g->beta == 0.0 ? 0.0 : g->beta * dp_load_d(e, g->dtype));
        dp_store_d(e, g->dtype, v);
      }
  }
}

int dp_cpu_gemm_blas(const dp_gemm_args *g) {
  if (ensure_blas()) return -1;
  if (g->dtype != DP_F32 && g->dtype != DP_F64)
    return dp_error("matmul on the cpu supports float32 and float64, got %s", dp_dtype_name(g->dtype));
  if (!blas.lib || !blas_call_fits()) {
    gemm_loop(g);
    return 0;
  }
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
  __atomic_store_n(&blas_main_held, true, __ATOMIC_RELEASE);
  return 0;
}
