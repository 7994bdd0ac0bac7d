/* The oneDNN engine (created once; DDPLUA_DNNL=0 turns oneDNN off), each
 * thread's stream with oneDNN's OpenMP threads held at 1, the call
 * counter, the primitive caches' lock and the reorders both the
 * convolutions (cpu_dnnl.c) and the bfloat16 matmuls (cpu_dnnl_matmul.c)
 * use (contracts: cpu_dnnl.h, cpu_dnnl_core.h). */
#include "backends/cpu/cpu_dnnl.h"

#include <stdlib.h>

#ifndef DDPLUA_HAVE_DNNL
const char *dp_dnnl_info(void) { return "not built with oneDNN"; }
long dp_dnnl_calls(void) { return 0; }
bool dp_dnnl_available(void) { return false; }
void dp_dnnl_set_enabled(bool on) { (void)on; }
#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_dnnl_core.h"
#include "core/error.h"
#include "tensor/storage.h"

/* ---- the engine, per-thread streams, oneDNN's own threads off ---- */

static struct {
  pthread_once_t once;
  dnnl_engine_t eng;
  bool ok;
  int enabled; /* atomic */
  void (*omp_set_num_threads)(int);
  char info[160];
} dn = {.once = PTHREAD_ONCE_INIT, .enabled = 1};

static void init(void) {
  const char *e = getenv("DDPLUA_DNNL");
  if (e && strcmp(e, "0") == 0) dn.enabled = 0;
  /* libgomp came in with libdnnl: ask it for the calling thread's OpenMP
   * thread count (1, so oneDNN computes on the thread that calls it) */
  void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gomp) dn.omp_set_num_threads = (void (*)(int))dlsym(gomp, "omp_set_num_threads");
  dn.ok = dnnl_engine_create(&dn.eng, dnnl_cpu, 0) == dnnl_success;
  const dnnl_version_t *v = dnnl_version();
  static const char *const isa_names[] = {
      "any", "sse41", "avx", "avx2", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"};
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char *isa_name = "other";
  const dnnl_cpu_isa_t isas[] = {dnnl_cpu_isa_all,
                                 dnnl_cpu_isa_sse41,
                                 dnnl_cpu_isa_avx,
                                 dnnl_cpu_isa_avx2,
                                 dnnl_cpu_isa_avx512_core,
                                 dnnl_cpu_isa_avx512_core_vnni,
                                 dnnl_cpu_isa_avx512_core_bf16,
                                 dnnl_cpu_isa_avx512_core_amx};
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
    if (isa == isas[i]) isa_name = isa_names[i];
  snprintf(dn.info, sizeof dn.info, "oneDNN %d.%d.%d (%s)%s", v->major, v->minor, v->patch, isa_name,
           dn.ok ? "" : ": no CPU engine");
}

const char *dp_dnnl_info(void) {
  pthread_once(&dn.once, init);
  if (dn.ok && !__atomic_load_n(&dn.enabled, __ATOMIC_RELAXED)) return "oneDNN disabled (DDPLUA_DNNL=0)";
  return dn.info;
}

bool dp_dnnl_available(void) {
  pthread_once(&dn.once, init);
  return dn.ok && __atomic_load_n(&dn.enabled, __ATOMIC_RELAXED);
}

void dp_dnnl_set_enabled(bool on) {
  pthread_once(&dn.once, init);
  __atomic_store_n(&dn.enabled, on ? 1 : 0, __ATOMIC_RELAXED);
}

static long calls; /* atomic */
long dp_dnnl_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }

static _Thread_local dnnl_stream_t tl_stream;
static _Thread_local bool tl_one_omp_thread;

/* One OpenMP thread for oneDNN on the calling thread, set before the
 * thread creates a primitive as well as before it runs one: oneDNN's jit
 * kernels take their thread count when the primitive is created, so one
 * created before the first stream on a thread kept OpenMP's default (every
 * core) and ran its parallel regions on threads the pool already occupies
 * (measured: a 64x32x3x3 weight reorder 7-10 ms, conv2d 1->32 28x28
 * forward 7.8-10.2 ms against 0.87-0.95 with OMP_NUM_THREADS=1). */
static void one_omp_thread(void) {
  if (tl_one_omp_thread) return;
  if (dn.omp_set_num_threads) dn.omp_set_num_threads(1);
  tl_one_omp_thread = true;
}

static dnnl_stream_t thread_stream(void) {
  if (!tl_stream) {
    one_omp_thread();
    if (dnnl_stream_create(&tl_stream, dn.eng, dnnl_stream_default_flags) != dnnl_success) tl_stream = NULL;
  }
  return tl_stream;
}

/* Each primitive's scratchpad (Winograd's transformed tiles: 6.7-15.5 MB a call in examples/unet's layers) came
 * from the tensor cache, which keeps blocks by size: after one training step it held one block of every size asked
 * for, 14 of them and 135 MiB in the U-Net, where one block a thread of the largest serves them all (a thread runs
 * one primitive at a time). The block lives as long as its thread; the pool's threads live as long as the
 * process. */
static _Thread_local void *tl_scratch;
static _Thread_local size_t tl_scratch_size;
void *dp_dnnl_thread_scratch(size_t n) {
  if (n <= tl_scratch_size) return tl_scratch;
  if (tl_scratch) dp_cpu_free(tl_scratch, tl_scratch_size);
  tl_scratch = dp_cpu_alloc(n);
  tl_scratch_size = tl_scratch ? n : 0;
  if (!tl_scratch) dp_error("oneDNN: out of memory for a scratchpad of %zu bytes", n);
  return tl_scratch;
}

dnnl_engine_t dp_dnnl_engine(void) { return dn.eng; }
void dp_dnnl_one_omp_thread(void) { one_omp_thread(); }
dnnl_stream_t dp_dnnl_thread_stream(void) { return thread_stream(); }
void dp_dnnl_count_calls(long n) { __atomic_fetch_add(&calls, n, __ATOMIC_RELAXED); }

/* ---- the caches' lock: a forked child gets a fresh one (the parent's may be held by a thread that is gone) ---- */

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void child_reset(void) { pthread_mutex_init(&cache_mu, NULL); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, child_reset); }
void dp_dnnl_cache_lock(void) {
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&cache_mu);
}
void dp_dnnl_cache_unlock(void) { pthread_mutex_unlock(&cache_mu); }

/* ---- reorders between layouts ---- */

int dp_dnnl_make_reorder(dnnl_primitive_t *out, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  one_omp_thread();
  *out = NULL;
  if (dnnl_memory_desc_equal(from, to)) return 0;
  dnnl_primitive_desc_t pd;
  DN_CHECK(dnnl_reorder_primitive_desc_create(&pd, from, dn.eng, to, dn.eng, NULL));
  dnnl_status_t st = dnnl_primitive_create(out, pd);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success) return dp_error("oneDNN: reorder primitive failed (status %d)", (int)st);
  return 0;
}

int dp_dnnl_exec_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from, void *src, const dnnl_memory_desc_t *to,
                         void *dst, dnnl_stream_t st) {
  dnnl_memory_t a = NULL, b = NULL;
  int rc = 0;
  if (dnnl_memory_create(&a, from, dn.eng, src) != dnnl_success ||
      dnnl_memory_create(&b, to, dn.eng, dst) != dnnl_success)
    rc = dp_error("oneDNN: memory for a reorder failed");
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
  if (!rc && (dnnl_primitive_execute(r, st, 2, args) != dnnl_success || dnnl_stream_wait(st) != dnnl_success))
    rc = dp_error("oneDNN: a reorder failed");
  if (a) dnnl_memory_destroy(a);
  if (b) dnnl_memory_destroy(b);
  return rc;
}

#endif
