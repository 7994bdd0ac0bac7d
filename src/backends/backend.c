/* Backend registry. The CPU backend is linked in; the CUDA backend is the
 * plugin ddplua_cuda.so, found next to the runtime (or at
 * $DDPLUA_CUDA_PLUGIN) and loaded on the first request for a CUDA device,
 * so a CPU-only run never pays for loading the CUDA libraries; before that,
 * the driver is asked whether any GPU exists at all. */
#include "backends/backend.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Every entry of dp_backend, and who must have it: ALL (every backend),
 * DEVICE (a device backend; NULL on the CPU), OPTIONAL (may be NULL). */
enum { ALL, DEVICE, OPTIONAL };
#define DP_BACKEND_ENTRIES(X)                                                                                          \
  X(name, ALL)                                                                                                         \
  X(device_count, ALL)                                                                                                 \
  X(alloc, ALL)                                                                                                        \
  X(free, ALL)                                                                                                         \
  X(synchronize, ALL)                                                                                                  \
  X(copy, ALL)                                                                                                         \
  X(copy_from_cpu, DEVICE)                                                                                             \
  X(copy_to_cpu, DEVICE)                                                                                               \
  X(fill, ALL)                                                                                                         \
  X(arange, ALL)                                                                                                       \
  X(rand, ALL)                                                                                                         \
  X(unary, ALL)                                                                                                        \
  X(unary_backward, ALL)                                                                                               \
  X(unary_with_grad, OPTIONAL)                                                                                         \
  X(binary, ALL)                                                                                                       \
  X(binary_scalar, ALL)                                                                                                \
  X(reduce, ALL)                                                                                                       \
  X(scatter_add_dim, ALL)                                                                                              \
  X(gemm, ALL)                                                                                                         \
  X(bias_act, ALL)                                                                                                     \
  X(gemm_bias, OPTIONAL)                                                                                               \
  X(channel_sum, ALL)                                                                                                  \
  X(softmax, ALL)                                                                                                      \
  X(softmax_backward, ALL)                                                                                             \
  X(cross_entropy, ALL)                                                                                                \
  X(cross_entropy_backward, ALL)                                                                                       \
  X(im2col, ALL)                                                                                                       \
  X(col2im, ALL)                                                                                                       \
  X(max_pool2d, ALL)                                                                                                   \
  X(max_pool2d_backward, ALL)                                                                                          \
  X(avg_pool2d, ALL)                                                                                                   \
  X(avg_pool2d_backward, ALL)                                                                                          \
  X(bn_stats, ALL)                                                                                                     \
  X(bn_forward, ALL)                                                                                                   \
  X(bn_backward_reduce, ALL)                                                                                           \
  X(bn_backward_elemt, ALL)                                                                                            \
  X(bn_relu_pool_backward, OPTIONAL)                                                                                   \
  X(layer_norm, ALL)                                                                                                   \
  X(layer_norm_backward, ALL)                                                                                          \
  X(group_norm, OPTIONAL)                                                                                              \
  X(group_norm_backward, OPTIONAL)                                                                                     \
  X(dropout, ALL)                                                                                                      \
  X(index_select, ALL)                                                                                                 \
  X(index_add, ALL)                                                                                                    \
  X(where, ALL)                                                                                                        \
  X(tri, ALL)                                                                                                          \
  X(gather, ALL)                                                                                                       \
  X(scatter, ALL)                                                                                                      \
  X(topk, ALL)                                                                                                         \
  X(cumsum, ALL)                                                                                                       \
  X(cum_extreme, ALL)                                                                                                  \
  X(cum_scan, ALL)                                                                                                     \
  X(searchsorted, ALL)                                                                                                 \
  X(nonzero, OPTIONAL)                                                                                                 \
  X(bincount, OPTIONAL)                                                                                                \
  X(histogram, OPTIONAL)                                                                                               \
  X(multinomial, ALL)                                                                                                  \
  X(attention, ALL)                                                                                                    \
  X(attention_backward, ALL)                                                                                           \
  X(rnn_cell, ALL)                                                                                                     \
  X(rnn_cell_backward, ALL)                                                                                            \
  X(adaptive_avg_pool2d, ALL)                                                                                          \
  X(adaptive_avg_pool2d_backward, ALL)                                                                                 \
  X(sgd_step, ALL)                                                                                                     \
  X(adam_step, ALL)                                                                                                    \
  X(rmsprop_step, ALL)                                                                                                 \
  X(adagrad_step, ALL)                                                                                                 \
  X(adadelta_step, ALL)                                                                                                \
  X(pow_sum_list, ALL)                                                                                                 \
  X(unscale, ALL)                                                                                                      \
  X(unscale_list, OPTIONAL)                                                                                            \
  X(memory_stats, DEVICE)                                                                                              \
  X(empty_cache, DEVICE)                                                                                               \
  X(set_option, DEVICE)                                                                                                \
  X(get_option, DEVICE)                                                                                                \
  X(device_name, DEVICE)                                                                                               \
  X(pg_new, OPTIONAL)                                                                                                  \
  X(conv2d, OPTIONAL)                                                                                                  \
  X(conv2d_backward, OPTIONAL)                                                                                         \
  X(conv2d_bf16_pays, OPTIONAL)                                                                                        \
  X(conv3d, OPTIONAL)                                                                                                  \
  X(conv3d_backward, OPTIONAL)                                                                                         \
  X(ctc_loss, OPTIONAL)                                                                                                \
  X(ctc_loss_backward, OPTIONAL)                                                                                       \
  X(moments, OPTIONAL)                                                                                                 \
  X(sum_squares, OPTIONAL)                                                                                             \
  X(index_select_dim, OPTIONAL)                                                                                        \
  X(index_add_dim, OPTIONAL)                                                                                           \
  X(resample_dim, OPTIONAL)                                                                                            \
  X(plane_gather, OPTIONAL)                                                                                            \
  X(plane_gather_backward, OPTIONAL)                                                                                   \
  X(resample_dim_backward, OPTIONAL)
#define DP_COUNT_ENTRY(field, who) +1
/* every member is a pointer: a member added to dp_backend but not listed here fails to compile */
_Static_assert(sizeof(dp_backend) == sizeof(void *) * (0 DP_BACKEND_ENTRIES(DP_COUNT_ENTRY)),
               "list every dp_backend entry in DP_BACKEND_ENTRIES");
#undef DP_COUNT_ENTRY

int dp_backend_check(const dp_backend *b, bool device) {
#define DP_CHECK_ENTRY(field, who)                                                                                     \
  if (!b->field && (who == ALL || (who == DEVICE && device)))                                                          \
    return dp_error("the %s backend is incomplete: its table has no '%s' entry (a plugin built for another version "   \
                    "of the runtime?)",                                                                                \
                    b->name ? b->name : "unnamed", #field);
  DP_BACKEND_ENTRIES(DP_CHECK_ENTRY)
#undef DP_CHECK_ENTRY
  return 0;
}

static const dp_backend *cuda_backend;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static char cuda_err[2048];

static const dp_runtime_api runtime_api = {
    .abi_version = DP_PLUGIN_ABI,
    .error = dp_error,
    .error_prefix = dp_error_prefix,
    .errmsg = dp_errmsg,
    .storage_retain = dp_storage_retain,
    .storage_release = dp_storage_release,
    .store_set = dp_store_set,
    .store_get = dp_store_get,
    .store_add = dp_store_add,
};

/* Directory of the object (host binary or core.so) this code is in. */
static void self_dir(char *buf, size_t n) {
  Dl_info info;
  buf[0] = 0;
  if (dladdr((void *)self_dir, &info) && info.dli_fname) {
    snprintf(buf, n, "%s", info.dli_fname);
    char *slash = strrchr(buf, '/');
    if (slash) *slash = 0;
    else snprintf(buf, n, ".");
  }
}

/* Asks the NVIDIA driver itself whether a GPU is there before loading the
 * plugin: the plugin pulls in cuBLAS and NCCL (hundreds of MB, seconds to
 * map), which a CPU-only machine calling ddp.device() should not pay for. */
static int driver_precheck(char *err, size_t n) {
  void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!drv) {
    snprintf(err, n, "CUDA is not available: no NVIDIA driver is installed (%s)", dlerror());
    return -1;
  }
  int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(drv, "cuInit");
  int (*cu_count)(int *) = (int (*)(int *))dlsym(drv, "cuDeviceGetCount");
  int count = 0, rc = cu_init && cu_count ? cu_init(0) : -1;
  if (rc == 0) rc = cu_count(&count);
  /* keep the driver loaded: the plugin's CUDA runtime uses it next */
  if (rc == 100 /* CUDA_ERROR_NO_DEVICE */ || (rc == 0 && count == 0)) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(err, n, "CUDA is not available: no GPU is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
             vis ? vis : "", vis ? ")" : "");
    return -1;
  }
  if (rc != 0) {
    snprintf(err, n, "CUDA is not available: the NVIDIA driver could not start (cuInit error %d)", rc);
    return -1;
  }
  return 0;
}

static void load_cuda(void) {
  char dir[1024], path[1200];
  const char *env = getenv("DDPLUA_CUDA_PLUGIN");
  /* a plugin named explicitly is loaded as asked (and explains itself) */
  if (!(env && *env) && driver_precheck(cuda_err, sizeof cuda_err)) return;
  void *lib = NULL;
  char tried[1400] = "";
  if (env && *env) {
    lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    snprintf(tried, sizeof tried, "%s", env);
  } else {
    self_dir(dir, sizeof dir);
    const char *rel[] = {"ddplua_cuda.so", "../ddplua_cuda.so", "../lib/ddplua_cuda.so"};
    for (size_t i = 0; i < 3 && !lib; i++) {
      snprintf(path, sizeof path, "%s/%s", dir, rel[i]);
      lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!lib && i == 0) snprintf(tried, sizeof tried, "%s (%s)", path, dlerror());
    }
  }
  if (!lib) {
    snprintf(cuda_err, sizeof cuda_err,
             "CUDA is not available: this ddplua was built without the CUDA backend or its plugin could "
             "not be loaded (tried %s)",
             tried);
    return;
  }
  dp_plugin_init_fn init = (dp_plugin_init_fn)dlsym(lib, DP_CUDA_PLUGIN_INIT);
  if (!init) {
    snprintf(cuda_err, sizeof cuda_err, "the CUDA plugin has no %s entry point", DP_CUDA_PLUGIN_INIT);
    return;
  }
  char err[400] = "";
  const dp_backend *b = init(&runtime_api, err, sizeof err);
  if (!b) {
    snprintf(cuda_err, sizeof cuda_err, "CUDA is not available: %s", err);
    return;
  }
  if (dp_backend_check(b, true)) { /* refused: every caller may rely on every required entry */
    snprintf(cuda_err, sizeof cuda_err, "CUDA is not available: %s", dp_errmsg());
    return;
  }
  cuda_backend = b;
}

const dp_backend *dp_backend_get(int devtype) {
  if (devtype == DP_CPU) return &dp_cpu_backend;
  if (devtype == DP_CUDA) return cuda_backend;
  return NULL;
}

const dp_backend *dp_backend_require(int devtype) {
  if (devtype == DP_CPU) return &dp_cpu_backend;
  if (devtype != DP_CUDA) {
    dp_error("unknown device type %d", devtype);
    return NULL;
  }
  pthread_once(&cuda_once, load_cuda);
  if (!cuda_backend) dp_error("%s", cuda_err);
  return cuda_backend;
}

int dp_cuda_count_without_init(void) {
  DIR *d = opendir("/proc/driver/nvidia/gpus");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis) { /* "0,2" (or UUIDs): as many as listed, up to the GPUs present; "" or "-1": none */
    int listed = 0;
    for (const char *p = vis; *p;) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      if (len == 0 || (len == 2 && strncmp(p, "-1", 2) == 0)) break; /* the list ends at an invalid entry */
      listed++;
      p += len + (comma ? 1 : 0);
    }
    if (listed < n) n = listed;
  }
  return n;
}
