/* Host-side internals of the CUDA plugin shared by its C files: device
 * state, error plumbing back to the runtime, the caching allocator,
 * cuBLAS, host<->device copies and the NCCL process group (what the .cu
 * files share with them is in cuda_common.h).
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

/* the NCCL files' name for dp_dtype_name (dtype.h's one table) */
static inline const char *dp_cu_dtype_name(dp_dtype t) { return dp_dtype_name(t); }

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
/* The device's state if it has been initialised, else NULL. */
dp_cu_device *dp_cu_device_get(int device);
/* Makes device current for the calling thread (no checks). */
int dp_cu_select(int device);
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

#endif
