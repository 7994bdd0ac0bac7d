/* Host-side internals of the CUDA plugin shared by its C files: device
 * contexts, error plumbing back to the runtime, the caching allocator,
 * cuBLAS, host<->device copies and the NCCL process group.
 *
 * The plugin must not call runtime functions by symbol (it is linked with
 * --no-undefined): only the inline helpers below, header-only code and
 * what dp_runtime_api hands over. */
#ifndef DP_CUDA_HOST_H
#define DP_CUDA_HOST_H

#include <pthread.h>

#include "backends/backend.h"
#include "backends/cuda/cuda_common.h"
#include "distributed/pg.h"
#include "tensor/dtype_conv.h"

extern const dp_runtime_api *dp_cu_api;

/* Options (dp_backend.set_option); read at every use. */
extern volatile int dp_cu_opt_tf32; /* float32 GEMMs on TF32 tensor cores */
extern volatile int dp_cu_opt_sync; /* wait after every kernel */

/* A device the plugin has started using. */
typedef struct {
  bool ready;
  dp_cu_ctx ctx;
  char name[160];
  size_t total_mem;
  dp_cu_fault *fault_host; /* mapped pinned slot (ctx.fault is its device alias) */
  int *flag_dev;           /* unscale's found-inf flag */
  int *flag_host;          /* pinned mirror */
  /* pinned staging for host<->device copies: two buffers so the host fills
   * one while the DMA engine drains the other */
  pthread_mutex_t stage_mu;
  char *stage[2];
  cudaEvent_t stage_ev[2];
  int stage_next;
} dp_cu_device;

#define DP_CU_STAGE_BYTES ((size_t)4 << 20)

int dp_cu_device_count(void);
/* Validates the index, initialises the device on first use, makes it the
 * calling thread's current device and raises pending device errors.
 * NULL + dp_error on failure. */
const dp_cu_ctx *dp_cu_enter(int device);
/* The device's state if it has been initialised, else NULL. */
dp_cu_device *dp_cu_device_get(int device);
/* Makes device current for the calling thread (no checks). */
int dp_cu_select(int device);
/* 0, or -1 + dp_error "<what> on cuda:N failed: <CUDA's message>" */
int dp_cu_check(cudaError_t e, const char *what, int device);
/* Raises (once) a pending kernel-reported error or an error posted from
 * another thread. */
int dp_cu_take_errors(void);
/* Posts an error from a background thread (the NCCL watchdog): the next
 * call into the backend on any thread raises it. */
void dp_cu_post_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Waits for the device's compute stream and raises what it reports. */
int dp_cu_sync_device(int device);

/* cuda_plugin.c: entries of the function table */
int dp_cu_copy_from_cpu(dp_tensor *dst, const dp_tensor *src_cpu);
int dp_cu_copy_to_cpu(dp_tensor *dst_cpu, const dp_tensor *src);
int dp_cu_synchronize(int device); /* device < 0: every device in use */
const char *dp_cu_device_name(int device);
int dp_cu_set_option(const char *name, double value);
int dp_cu_get_option(const char *name, double *value);

/* cuda_alloc.c */
void *dp_cu_alloc(int device, size_t nbytes);
void dp_cu_free(int device, void *p, size_t nbytes);
int dp_cu_empty_cache(void);
int dp_cu_memory_stats(int device, dp_device_mem_stats *out);

/* cuda_blas.c */
int dp_cu_gemm(const dp_gemm_args *g);

/* cuda_backend.c: the function table */
extern const dp_backend dp_cu_backend;

/* nccl_group.c. A plugin built without NCCL (DP_CU_NO_NCCL, cmake/cuda.cmake)
 * has no NCCL group: its table's pg_new is NULL, which the runtime reports
 * as "the CUDA plugin was built without NCCL". */
#ifndef DP_CU_NO_NCCL
dp_pg *dp_cu_pg_nccl_new(const dp_pg_init *init);
/* Waits for the communication streams of the live NCCL groups on device
 * (every device when < 0): ddp.synchronize() covers async collectives. */
int dp_cu_nccl_sync_streams(int device);
#else
#define dp_cu_pg_nccl_new NULL
static inline int dp_cu_nccl_sync_streams(int device) {
  (void)device;
  return 0;
}
#endif

/* ---- tensor helpers (inline: the runtime's are out of reach) ---- */
static inline void *dp_cu_ptr(const dp_tensor *t) {
  return (char *)t->storage->data + (size_t)t->offset * dp_dtype_bytes(t->dtype);
}
static inline int64_t dp_cu_numel(const dp_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}
static inline bool dp_cu_contig(const dp_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] == 0) return true;
    if (t->shape[d] != 1 && t->stride[d] != s) return false;
    s *= t->shape[d];
  }
  return true;
}
static inline const char *dp_cu_dtype_name(dp_dtype t) {
  static const char *names[DP_NDTYPES] = {"float32", "float64", "int64", "uint8", "bfloat16", "float16"};
  return (unsigned)t < DP_NDTYPES ? names[t] : "?";
}

#endif
