/* The CUDA backend plugin (lib/ddplua_cuda.so): entry point, per-device
 * state, error plumbing, options and host<->device copies.
 *
 * Devices are set up lazily on first use: one non-blocking compute stream
 * (every kernel, copy, cuBLAS call and the NCCL ordering hang on it), the
 * mapped fault slot kernels report data errors into, and pinned staging
 * buffers. Errors that surface asynchronously (a kernel's report, an
 * aborted NCCL communicator) are raised by the next call into the plugin
 * on any thread, and at every synchronisation point. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_host.h"

const dp_runtime_api *dp_cu_api;
volatile int dp_cu_opt_tf32;
volatile int dp_cu_opt_sync;

static int ndev;
static dp_cu_device devs[DP_CU_MAXDEV];
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int cur_dev = -1;

/* errors posted by background threads */
static pthread_mutex_t post_mu = PTHREAD_MUTEX_INITIALIZER;
static char posted[1024];
static volatile int have_posted;

int dp_cu_error(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return dp_cu_api->error("%s", buf);
}

void dp_cu_post_error(const char *fmt, ...) {
  pthread_mutex_lock(&post_mu);
  if (!have_posted) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(posted, sizeof posted, fmt, ap);
    va_end(ap);
    have_posted = 1;
  }
  pthread_mutex_unlock(&post_mu);
}

int dp_cu_check(cudaError_t e, const char *what, int device) {
  if (e == cudaSuccess) return 0;
  (void)cudaGetLastError(); /* clear a non-sticky error */
  if (e == cudaErrorMemoryAllocation) return dp_cu_error("%s on cuda:%d failed: out of device memory", what, device);
  return dp_cu_error("%s on cuda:%d failed: %s", what, device, cudaGetErrorString(e));
}

int dp_cu_device_count(void) { return ndev; }

/* ready is published with release order after the device's fields are
 * set, so a thread that sees it also sees them */
static bool is_ready(const dp_cu_device *dv) { return __atomic_load_n(&dv->ready, __ATOMIC_ACQUIRE); }

dp_cu_device *dp_cu_device_get(int device) {
  if (device < 0 || device >= ndev || !is_ready(&devs[device])) return NULL;
  return &devs[device];
}

int dp_cu_select(int device) {
  if (cur_dev == device) return 0;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return dp_cu_check(e, "selecting the device", device);
  cur_dev = device;
  return 0;
}

static const char *fault_text(const dp_cu_fault *f, char *buf, size_t n) {
  const long long *v = f->v;
  switch (f->code) {
  case DP_CU_FAULT_INDEX_SELECT:
  case DP_CU_FAULT_INDEX_ADD:
    snprintf(buf, n, "%s: index %lld at position %lld is out of range %lld..%lld",
             f->code == DP_CU_FAULT_INDEX_SELECT ? "index_select (embedding)" : "index_add (embedding backward)", v[0],
             v[1], v[2], v[3]);
    break;
  case DP_CU_FAULT_TARGET:
    snprintf(buf, n, "cross_entropy: target %lld at position %lld is out of range: classes are %lld..%lld", v[0], v[1],
             v[2], v[3]);
    break;
  case DP_CU_FAULT_SCATTER:
    snprintf(buf, n, "scatter_add: index %lld out of range [%lld, %lld]", v[0], v[1], v[2]);
    break;
  case DP_CU_FAULT_GATHER:
  case DP_CU_FAULT_SCATTER_DIM:
    snprintf(buf, n, "%s: index %lld at position %lld of the index is out of range %lld..%lld",
             f->code == DP_CU_FAULT_GATHER ? "gather" : "scatter", v[0], v[1], v[2], v[3]);
    break;
  default: snprintf(buf, n, "a kernel reported error code %d", f->code); break;
  }
  return buf;
}

int dp_cu_take_errors(void) {
  if (have_posted) {
    char msg[1024];
    pthread_mutex_lock(&post_mu);
    snprintf(msg, sizeof msg, "%s", posted);
    have_posted = 0;
    pthread_mutex_unlock(&post_mu);
    return dp_cu_error("%s", msg);
  }
  for (int d = 0; d < ndev; d++) {
    dp_cu_device *dv = &devs[d];
    if (!is_ready(dv) || !dv->fault_host->ready) continue;
    char text[400];
    fault_text(dv->fault_host, text, sizeof text);
    dv->fault_host->ready = 0;
    /* let the next fault be recorded (ordered after the kernels already
     * queued); the stream belongs to device d, so d must be current */
    int prev = cur_dev;
    if (dp_cu_select(d) == 0) cudaMemsetAsync(dv->ctx.fault_claim, 0, sizeof(int), dv->ctx.stream);
    if (prev >= 0) dp_cu_select(prev);
    return dp_cu_error("%s (on cuda:%d%s)", text, d,
                       dp_cu_opt_sync ? ""
                                      : "; reported asynchronously, possibly by an op before this one: set "
                                        "DDPLUA_CUDA_SYNC=1 to raise it at the op that failed");
  }
  return 0;
}

static int init_device(int d) {
  dp_cu_device *dv = &devs[d];
  cudaError_t e;
  if ((e = cudaSetDevice(d)) != cudaSuccess) return dp_cu_check(e, "initialising the device", d);
  cur_dev = d;
  struct cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, d)) != cudaSuccess) return dp_cu_check(e, "querying the device", d);
  snprintf(dv->name, sizeof dv->name, "%.100s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (double)(1ull << 30));
  dv->total_mem = prop.totalGlobalMem;
  dv->ctx.device = d;
  dv->ctx.sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  if ((e = cudaStreamCreateWithFlags(&dv->ctx.stream, cudaStreamNonBlocking)) != cudaSuccess)
    return dp_cu_check(e, "creating the compute stream", d);
  void *fh = NULL, *fd = NULL;
  if ((e = cudaHostAlloc(&fh, sizeof(dp_cu_fault), cudaHostAllocMapped | cudaHostAllocPortable)) != cudaSuccess ||
      (e = cudaHostGetDevicePointer(&fd, fh, 0)) != cudaSuccess)
    return dp_cu_check(e, "allocating the error slot", d);
  memset(fh, 0, sizeof(dp_cu_fault));
  dv->fault_host = fh;
  dv->ctx.fault = fd;
  if ((e = cudaMalloc((void **)&dv->ctx.fault_claim, sizeof(int))) != cudaSuccess ||
      (e = cudaMemset(dv->ctx.fault_claim, 0, sizeof(int))) != cudaSuccess ||
      (e = cudaMalloc((void **)&dv->flag_dev, sizeof(int))) != cudaSuccess ||
      (e = cudaHostAlloc((void **)&dv->flag_host, sizeof(int), cudaHostAllocPortable)) != cudaSuccess)
    return dp_cu_check(e, "allocating device flags", d);
  pthread_mutex_init(&dv->stage_mu, NULL);
  for (int i = 0; i < 2; i++) {
    if ((e = cudaHostAlloc((void **)&dv->stage[i], DP_CU_STAGE_BYTES, cudaHostAllocPortable)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&dv->stage_ev[i], cudaEventDisableTiming)) != cudaSuccess)
      return dp_cu_check(e, "allocating pinned staging buffers", d);
  }
  __atomic_store_n(&dv->ready, true, __ATOMIC_RELEASE);
  return 0;
}

const dp_cu_ctx *dp_cu_enter(int device) {
  if (device < 0 || device >= ndev) {
    if (ndev == 1) dp_cu_error("cuda:%d does not exist: one GPU is visible (cuda:0)", device);
    else dp_cu_error("cuda:%d does not exist: %d GPUs are visible (cuda:0 .. cuda:%d)", device, ndev, ndev - 1);
    return NULL;
  }
  dp_cu_device *dv = &devs[device];
  if (!is_ready(dv)) {
    pthread_mutex_lock(&init_mu);
    int rc = is_ready(dv) ? 0 : init_device(device);
    pthread_mutex_unlock(&init_mu);
    if (rc) return NULL;
  }
  if (dp_cu_take_errors() || dp_cu_select(device)) return NULL;
  return &dv->ctx;
}

int dp_cu_after_launch(const dp_cu_ctx *c, const char *op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return dp_cu_error("%s: launching the CUDA kernel on cuda:%d failed: %s", op, c->device, cudaGetErrorString(e));
  if (!dp_cu_opt_sync) return 0;
  e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) return dp_cu_error("%s on cuda:%d failed: %s", op, c->device, cudaGetErrorString(e));
  return dp_cu_take_errors();
}

int dp_cu_sync_device(int device) {
  dp_cu_device *dv = dp_cu_device_get(device);
  if (!dv) return dp_cu_take_errors();
  if (dp_cu_select(device)) return -1;
  cudaError_t e = cudaStreamSynchronize(dv->ctx.stream);
  if (e != cudaSuccess)
    return dp_cu_error("cuda:%d: a queued operation failed: %s (the CUDA context may be unusable now)", device,
                       cudaGetErrorString(e));
  return dp_cu_take_errors();
}

void *dp_cu_scratch(const dp_cu_ctx *c, size_t nbytes) { return dp_cu_alloc(c->device, nbytes); }
void dp_cu_scratch_free(const dp_cu_ctx *c, void *p, size_t nbytes) { dp_cu_free(c->device, p, nbytes); }

/* ---- host <-> device copies through pinned staging ----
 * Host to device returns once the data sits in pinned memory (the DMA runs
 * behind the caller's next steps); device to host waits, chunk by chunk,
 * with the next chunk's DMA already queued. */
static int stage_copy(dp_cu_device *dv, char *dst, const char *src, size_t n, bool to_device) {
  const dp_cu_ctx *c = &dv->ctx;
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&dv->stage_mu);
  if (to_device) {
    for (size_t off = 0; off < n && e == cudaSuccess; off += DP_CU_STAGE_BYTES) {
      size_t len = n - off < DP_CU_STAGE_BYTES ? n - off : DP_CU_STAGE_BYTES;
      int b = dv->stage_next;
      dv->stage_next ^= 1;
      if ((e = cudaEventSynchronize(dv->stage_ev[b])) != cudaSuccess) break; /* its last DMA is done */
      memcpy(dv->stage[b], src + off, len);
      if ((e = cudaMemcpyAsync(dst + off, dv->stage[b], len, cudaMemcpyHostToDevice, c->stream)) != cudaSuccess) break;
      e = cudaEventRecord(dv->stage_ev[b], c->stream);
    }
  } else {
    size_t prev_off = 0, prev_len = 0;
    int prev_b = -1;
    for (size_t off = 0;; off += DP_CU_STAGE_BYTES) {
      int b = -1;
      size_t len = 0;
      if (off < n) {
        len = n - off < DP_CU_STAGE_BYTES ? n - off : DP_CU_STAGE_BYTES;
        b = dv->stage_next;
        dv->stage_next ^= 1;
        /* the host may still be filling this buffer for an earlier
         * host-to-device copy: that DMA was recorded on the event */
        if ((e = cudaEventSynchronize(dv->stage_ev[b])) != cudaSuccess) break;
        if ((e = cudaMemcpyAsync(dv->stage[b], src + off, len, cudaMemcpyDeviceToHost, c->stream)) != cudaSuccess)
          break;
        if ((e = cudaEventRecord(dv->stage_ev[b], c->stream)) != cudaSuccess) break;
      }
      if (prev_b >= 0) {
        if ((e = cudaEventSynchronize(dv->stage_ev[prev_b])) != cudaSuccess) break;
        memcpy(dst + prev_off, dv->stage[prev_b], prev_len);
      }
      if (b < 0) break;
      prev_b = b, prev_off = off, prev_len = len;
    }
  }
  pthread_mutex_unlock(&dv->stage_mu);
  if (e != cudaSuccess)
    return dp_cu_error("copy %s cuda:%d failed: %s", to_device ? "to" : "from", c->device, cudaGetErrorString(e));
  return 0;
}

int dp_cu_copy_from_cpu(dp_tensor *dst, const dp_tensor *src_cpu) {
  int d = dst->storage->device.index;
  if (!dp_cu_enter(d)) return -1;
  size_t n = (size_t)dp_cu_numel(dst) * dp_dtype_bytes(dst->dtype);
  return n ? stage_copy(&devs[d], dp_cu_ptr(dst), dp_cu_ptr(src_cpu), n, true) : 0;
}

int dp_cu_copy_to_cpu(dp_tensor *dst_cpu, const dp_tensor *src) {
  int d = src->storage->device.index;
  if (!dp_cu_enter(d)) return -1;
  size_t n = (size_t)dp_cu_numel(src) * dp_dtype_bytes(src->dtype);
  if (n && stage_copy(&devs[d], dp_cu_ptr(dst_cpu), dp_cu_ptr(src), n, false)) return -1;
  return dp_cu_take_errors(); /* a sync point: what the device reported so far is raised here */
}

/* ---- entry points of the function table ---- */
/* As torch.cuda.synchronize: the compute stream, then the NCCL groups'
 * communication streams (async collectives nobody waited for yet). */
int dp_cu_synchronize(int device) {
  if (device >= ndev) return dp_cu_error("cuda:%d does not exist: %d GPU(s) visible", device, ndev);
  if (device >= 0) return dp_cu_sync_device(device) || dp_cu_nccl_sync_streams(device) ? -1 : 0;
  for (int d = 0; d < ndev; d++)
    if (is_ready(&devs[d]) && dp_cu_sync_device(d)) return -1;
  if (dp_cu_nccl_sync_streams(-1)) return -1;
  return dp_cu_take_errors();
}

const char *dp_cu_device_name(int device) {
  if (!dp_cu_enter(device)) return NULL;
  return devs[device].name;
}

int dp_cu_set_option(const char *name, double value) {
  if (strcmp(name, "tf32") == 0) dp_cu_opt_tf32 = value != 0;
  else if (strcmp(name, "sync") == 0) dp_cu_opt_sync = value != 0;
  else return dp_cu_error("unknown CUDA option '%s' (expected \"tf32\" or \"sync\")", name);
  return 0;
}

int dp_cu_get_option(const char *name, double *value) {
  if (strcmp(name, "tf32") == 0) *value = dp_cu_opt_tf32;
  else if (strcmp(name, "sync") == 0) *value = dp_cu_opt_sync;
  else return dp_cu_error("unknown CUDA option '%s' (expected \"tf32\" or \"sync\")", name);
  return 0;
}

static bool env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

__attribute__((visibility("default"))) const dp_backend *dp_cuda_plugin_init(const dp_runtime_api *api, char *err,
                                                                             size_t errlen) {
  if (!api || api->abi_version != DP_PLUGIN_ABI) {
    snprintf(err, errlen, "the CUDA plugin was built for plugin ABI %d but the runtime speaks %d: rebuild both",
             DP_PLUGIN_ABI, api ? api->abi_version : -1);
    return NULL;
  }
  dp_cu_api = api;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorInsufficientDriver) {
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(err, errlen, "no usable NVIDIA driver: libcuda.so.1 is missing or older than CUDA %d.%d requires (%s)",
             rt / 1000, (rt % 1000) / 10, cudaGetErrorString(e));
    return NULL;
  }
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(err, errlen, "no GPU is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "",
             vis ? ")" : "");
    return NULL;
  }
  if (e != cudaSuccess) {
    snprintf(err, errlen, "the CUDA runtime could not start: %s", cudaGetErrorString(e));
    return NULL;
  }
  ndev = n < DP_CU_MAXDEV ? n : DP_CU_MAXDEV;
  dp_cu_opt_tf32 = env_on("DDPLUA_TF32");
  dp_cu_opt_sync = env_on("DDPLUA_CUDA_SYNC");
  return &dp_cu_backend;
}
