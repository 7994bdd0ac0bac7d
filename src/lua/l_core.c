/* luaopen_ddplua_core: the C half of `require "ddplua"`. Each binding file
 * adds its functions to the module table and its methods to the tensor
 * method table (exposed as core.Tensor so lua/ddplua can add Lua methods). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd.h"
#include "backends/cpu/cpu_dnnl.h"
#include "backends/cpu/cpu_fpu.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_model_kernels.h"
#include "backends/cpu/cpu_peak.h"
#include "backends/cpu/cpu_vec.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/sgemm_stats.h"
#include "lua/l_rerun.h"
#include "lua/l_util.h"
#include "ops/autocast.h"
#include "ops/ops.h"

static int l_manual_seed(lua_State *L) {
  lua_Integer s = luaL_checkinteger(L, 1);
  dp_manual_seed((uint64_t)s);
  return 0;
}

static int l_initial_seed(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dp_rng_seed());
  return 1;
}

static int l_get_rng_state(lua_State *L) {
  uint64_t s, o;
  dp_rng_get_state(&s, &o);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)s);
  lua_setfield(L, -2, "seed");
  lua_pushinteger(L, (lua_Integer)o);
  lua_setfield(L, -2, "offset");
  return 1;
}

static int l_set_rng_state(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "seed");
  lua_getfield(L, 1, "offset");
  int ok1, ok2;
  lua_Integer s = lua_tointegerx(L, -2, &ok1), o = lua_tointegerx(L, -1, &ok2);
  if (!ok1 || !ok2) return luaL_error(L, "set_rng_state: expected {seed=<integer>, offset=<integer>}");
  dp_rng_set_state((uint64_t)s, (uint64_t)o);
  return 0;
}

static int l_set_grad_enabled(lua_State *L) {
  lua_pushboolean(L, dp_set_grad_enabled(lua_toboolean(L, 1)));
  return 1;
}

static int l_is_grad_enabled(lua_State *L) {
  lua_pushboolean(L, dp_grad_enabled());
  return 1;
}

static int l_clock(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
  return 1;
}

static int l_memory_stats(lua_State *L) {
  dp_mem_stats s = dp_cpu_mem_stats();
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)s.live_bytes);
  lua_setfield(L, -2, "live_bytes");
  lua_pushinteger(L, (lua_Integer)s.peak_bytes);
  lua_setfield(L, -2, "peak_bytes");
  lua_pushinteger(L, (lua_Integer)s.cached_bytes);
  lua_setfield(L, -2, "cached_bytes");
  lua_pushinteger(L, (lua_Integer)s.allocs);
  lua_setfield(L, -2, "allocs");
  lua_pushinteger(L, (lua_Integer)s.cache_hits);
  lua_setfield(L, -2, "cache_hits");
  return 1;
}

static int l_empty_cache(lua_State *L) {
  (void)L;
  dp_cpu_empty_cache();
  return 0;
}

static int l_blas_info(lua_State *L) {
  lua_pushstring(L, dp_blas_info());
  return 1;
}

static int l_set_num_threads(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 1) return luaL_argerror(L, 1, "number of threads must be >= 1");
  int k = n > INT32_MAX ? INT32_MAX : (int)n;
  dp_sgemm_set_num_threads(k);
  LT_CHECK(L, dp_blas_set_num_threads(k));
  return 0;
}

/* gemm_impl() -> "avx512" | "avx2" | "blas": what float32 matmuls on the cpu
 * use now (DDPLUA_GEMM, or set_gemm_impl). */
static int l_gemm_impl(lua_State *L) {
  dp_sgemm_impl impl;
  LT_CHECK(L, dp_sgemm_get_impl(&impl));
  lua_pushstring(L, dp_sgemm_impl_name(impl));
  return 1;
}

/* set_gemm_impl("own" | "blas" | "avx512" | "avx2"): overrides DDPLUA_GEMM
 * for this process (benchmarks compare the implementations with it). */
static int l_set_gemm_impl(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  dp_sgemm_impl impl;
  if (dp_sgemm_parse_impl(name, &impl) || dp_sgemm_set_impl(impl)) {
    dp_error_prefix("set_gemm_impl: ");
    return lt_error(L);
  }
  return 0;
}

/* set_flush_denormal(on) -> whether this CPU can (PyTorch's
 * torch.set_flush_denormal): flush-to-zero and denormals-are-zero on every
 * thread ddplua computes on (cpu_fpu.h); on by default. */
static int l_set_flush_denormal(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lua_pushboolean(L, dp_fpu_set_flush_denormal(lua_toboolean(L, 1)));
  return 1;
}

/* core.cpu_info() -> "<model>, <n> cpus | <features> | kernels <isa>" (the
 * benchmarks print it) */
static int l_cpu_info(lua_State *L) {
  lua_pushstring(L, dp_cpu_describe());
  return 1;
}

/* core.set_cpu_kernels("avx512" | "avx2" | "base" | "auto") -> the previous
 * name: which per-ISA float32 kernels run (specs hold each against the
 * float64 reference; DDPLUA_CPU_ISA sets the same at start) */
static int l_set_cpu_kernels(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const char *prev = dp_cpu_vec_get()->name;
  LT_CHECK(L, dp_cpu_vec_set(name));
  lua_pushstring(L, prev);
  return 1;
}

/* core.set_attention_amx(on) -> whether it was on: bfloat16 attention's score and weight products in bfloat16
 * (on AMX tiles or with AVX512-BF16 dot products, whichever the CPU has: "auto") or every operand widened to
 * float32 ("widen"); core.attention_bf16([kind]) -> the setting before, one of "auto", "amx", "avx512_bf16",
 * "widen" (cpu_model_kernels.h, cpu_attn_bf16.h); a kind the CPU cannot run is an error */
static int l_set_attention_amx(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lua_pushboolean(L, dp_cpu_attention_bf16_amx(lua_toboolean(L, 1)));
  return 1;
}
static int l_attention_bf16(lua_State *L) {
  static const char *const kinds[] = {"auto", "amx", "avx512_bf16", "widen", NULL};
  int kind = lua_isnoneornil(L, 1) ? -1 : luaL_checkoption(L, 1, NULL, kinds);
  int was = dp_cpu_attention_bf16_kernel(kind);
  if (was < 0)
    return luaL_error(L, "core.attention_bf16: this CPU has no %s",
                      kind == DP_ATTN_BF16_AMX ? "AMX-BF16" : "AVX512-BF16");
  lua_pushstring(L, kinds[was]);
  return 1;
}

/* core.onednn_info() -> "oneDNN 2.6.3 (avx512_core)", or why it is not
 * used; core.set_onednn(on) -> whether it was on: the CPU convolutions (and
 * native bfloat16 GEMMs) through oneDNN or ddplua's own kernels */
static int l_onednn_info(lua_State *L) {
  lua_pushstring(L, dp_dnnl_info());
  return 1;
}
static int l_onednn_calls(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dp_dnnl_calls());
  return 1;
}
/* core.set_conv_winograd(on) -> whether it was on (cpu_dnnl.h);
 * core._onednn_winograd_calls(): the calls that ran Winograd so far */
static int l_set_conv_winograd(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  bool was = dp_dnnl_winograd_enabled();
  dp_dnnl_set_winograd(lua_toboolean(L, 1));
  lua_pushboolean(L, was);
  return 1;
}
static int l_onednn_winograd_calls(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dp_dnnl_winograd_calls());
  return 1;
}
/* core.set_conv_narrow_grad(on) -> whether it was on; core._conv_narrow_grad_calls(): the weight gradients
 * cpu_conv_narrow_grad_w.c computed so far (cpu_kernels.h) */
static int l_set_conv_narrow_grad(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lua_pushboolean(L, dp_cpu_set_conv_narrow_grad(lua_toboolean(L, 1)));
  return 1;
}
static int l_conv_narrow_grad_calls(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dp_cpu_conv_narrow_grad_calls());
  return 1;
}
/* core._onednn_bf16_conv_calls(): convolutions computed in bfloat16 so far (cpu_dnnl.h) */
static int l_onednn_bf16_conv_calls(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dp_dnnl_bf16_conv_calls());
  return 1;
}
static int l_set_onednn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  bool was = dp_dnnl_available();
  dp_dnnl_set_enabled(lua_toboolean(L, 1));
  lua_pushboolean(L, was);
  return 1;
}

/* core.set_gemm_stats(on) -> whether it was on; core.gemm_stats() -> a list
 * of {m, n, k, batch, trans_a, trans_b, calls, seconds}, largest total
 * first, and the number of shapes the full table dropped;
 * core.reset_gemm_stats() (sgemm_stats.h) */
static int l_set_gemm_stats(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lua_pushboolean(L, dp_sgemm_stats_set(lua_toboolean(L, 1)));
  return 1;
}
static int l_gemm_stats(lua_State *L) {
  static dp_sgemm_stat rows[DP_SGEMM_STATS_MAX]; /* a stats table is 40 KB: not on the stack */
  int64_t dropped = 0;
  int n = dp_sgemm_stats_get(rows, DP_SGEMM_STATS_MAX, &dropped);
  if (n > DP_SGEMM_STATS_MAX) n = DP_SGEMM_STATS_MAX;
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    const dp_sgemm_stat *s = &rows[i];
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)s->m), lua_setfield(L, -2, "m");
    lua_pushinteger(L, (lua_Integer)s->n), lua_setfield(L, -2, "n");
    lua_pushinteger(L, (lua_Integer)s->k), lua_setfield(L, -2, "k");
    lua_pushinteger(L, (lua_Integer)s->batch), lua_setfield(L, -2, "batch");
    lua_pushboolean(L, s->trans_a), lua_setfield(L, -2, "trans_a");
    lua_pushboolean(L, s->trans_b), lua_setfield(L, -2, "trans_b");
    lua_pushinteger(L, (lua_Integer)s->calls), lua_setfield(L, -2, "calls");
    lua_pushnumber(L, s->seconds), lua_setfield(L, -2, "seconds");
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, (lua_Integer)dropped);
  return 2;
}
static int l_reset_gemm_stats(lua_State *L) {
  (void)L;
  dp_sgemm_stats_reset();
  return 0;
}

/* core._fma_peak(threads, seconds) -> GFLOP/s, isa: the float32 FMA peak
 * of that many pool threads (cpu_peak.h; the benchmarks print it) */
static int l_fma_peak(lua_State *L) {
  int threads = (int)luaL_checkinteger(L, 1);
  double seconds = luaL_optnumber(L, 2, 0.5);
  luaL_argcheck(L, seconds > 0 && seconds <= 60, 2, "seconds must be in (0, 60]");
  const char *isa = NULL;
  lua_pushnumber(L, dp_cpu_fma_peak(threads, seconds, &isa));
  lua_pushstring(L, isa);
  return 2;
}

/* core._memcpy_gbs(bytes, reps) -> GB/s read + written by libc memcpy on
 * one thread (cpu_peak.h) */
static int l_memcpy_gbs(lua_State *L) {
  lua_Integer bytes = luaL_checkinteger(L, 1), reps = luaL_optinteger(L, 2, 5);
  luaL_argcheck(L, bytes > 0 && bytes <= ((lua_Integer)1 << 32), 1, "bytes must be in [1, 4 GiB]");
  luaL_argcheck(L, reps > 0 && reps <= 1000, 2, "reps must be in [1, 1000]");
  lua_pushnumber(L, dp_cpu_memcpy_gbs((size_t)bytes, (int)reps));
  return 1;
}

/* core._get_flush_denormal() -> the process-wide setting (specs) */
static int l_get_flush_denormal(lua_State *L) {
  lua_pushboolean(L, dp_fpu_get_flush_denormal());
  return 1;
}

/* the threads ddplua's kernels use: set_num_threads', or the automatic
 * count (cores / ranks on the node) */
static int l_get_num_threads(lua_State *L) {
  lua_pushinteger(L, dp_sgemm_get_num_threads());
  return 1;
}

static int l_cuda_available(lua_State *L) {
  const dp_backend *b = dp_backend_require(DP_CUDA);
  lua_pushboolean(L, b && b->device_count() > 0);
  if (!b) {
    lua_pushstring(L, dp_errmsg());
    return 2;
  }
  return 1;
}

static int l_cuda_device_count(lua_State *L) {
  const dp_backend *b = dp_backend_require(DP_CUDA);
  lua_pushinteger(L, b ? b->device_count() : 0);
  return 1;
}

/* synchronize([device]): waits for queued device work (every device in use
 * when none is given); a no-op when CUDA was never used. */
static int l_synchronize(lua_State *L) {
  const dp_backend *b = dp_backend_get(DP_CUDA);
  if (b) LT_CHECK(L, b->synchronize((int)luaL_optinteger(L, 1, -1)));
  return 0;
}

static int l_collectgarbage_paced(lua_State *L) {
  lt_gc_pace(L);
  return 0;
}

/* Lua's collectgarbage (upvalue 1) with every argument and result as they
 * are; a full collection (no option, or "collect") also resets the tensor
 * pacer (lt_gc_collected), which would otherwise run its own soon after. */
static int l_collectgarbage_wrapped(lua_State *L) {
  int n = lua_gettop(L);
  bool full = lua_isnoneornil(L, 1) || (lua_type(L, 1) == LUA_TSTRING && strcmp(lua_tostring(L, 1), "collect") == 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  if (full) lt_gc_collected();
  return lua_gettop(L);
}

/* core._gc_counts() -> the full and the young collections the tensor pacer ran itself (internal) */
static int l_gc_counts(lua_State *L) {
  int64_t full, young;
  lt_gc_counts(&full, &young);
  lua_pushinteger(L, (lua_Integer)full);
  lua_pushinteger(L, (lua_Integer)young);
  return 2;
}

/* _G.collectgarbage wrapped once (a second load of the module finds it done) */
static void wrap_collectgarbage(lua_State *L) {
  lua_getglobal(L, "collectgarbage");
  if (lua_iscfunction(L, -1) && lua_tocfunction(L, -1) != l_collectgarbage_wrapped) {
    lua_pushcclosure(L, l_collectgarbage_wrapped, 1);
    lua_setglobal(L, "collectgarbage");
  } else {
    lua_pop(L, 1);
  }
}

/* ---- ddp.keep and the runtime between reruns (l_rerun.h) ---- */

/* The kept values live in the registry, which outlives the fresh global
 * environment every `ddplua --watch` rerun gets (src/host/rerun.c): the
 * same process, the same Lua state, everything else new. */
#define KEPT_REGISTRY_KEY "ddplua.kept"

/* keep(key, fn) -> the value kept under key in this process, or fn()'s
 * first result, kept from now on. */
static int l_keep(lua_State *L) {
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "keep: expected a string key (keep(key, fn)), got a %s", luaL_typename(L, 1));
  if (lua_type(L, 2) != LUA_TFUNCTION)
    return luaL_error(L, "keep: expected a function that makes the value kept under '%s', got a %s", lua_tostring(L, 1),
                      luaL_typename(L, 2));
  lua_settop(L, 2);
  if (lua_getfield(L, LUA_REGISTRYINDEX, KEPT_REGISTRY_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, KEPT_REGISTRY_KEY);
  }
  lua_pushvalue(L, 1);
  if (lua_rawget(L, 3) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 0, 1); /* an error in fn propagates; nothing is kept */
  if (lua_isnil(L, -1))
    return luaL_error(L, "keep: the function for '%s' returned nil; return the value to keep", lua_tostring(L, 1));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_rawset(L, 3);
  return 1;
}

static struct {
  bool taken;
  uint64_t seed, offset;
  dp_autocast_state autocast;
  int sgemm_threads, blas_threads;
  bool has_impl;
  dp_sgemm_impl impl;
} initial;

void lt_rerun_snapshot(void) {
  dp_rng_get_state(&initial.seed, &initial.offset);
  initial.autocast = dp_autocast_get();
  initial.sgemm_threads = dp_sgemm_get_num_threads();
  initial.blas_threads = dp_blas_get_num_threads();
  initial.has_impl = dp_sgemm_get_impl(&initial.impl) == 0; /* a bad DDPLUA_GEMM fails each run alike */
  initial.taken = true;
}

/* What a script can change in the C runtime, back to how a fresh process
 * starts: the generator, grad mode, autocast, threads, the GEMM, CUDA's
 * TF32/sync options (their defaults come from the environment). */
void lt_rerun_reset(void) {
  if (!initial.taken) return;
  dp_rng_set_state(initial.seed, initial.offset);
  dp_set_grad_enabled(true);
  dp_autocast_state prev;
  dp_autocast_set(initial.autocast, &prev);
  dp_sgemm_set_num_threads(initial.sgemm_threads);
  if (initial.blas_threads > 0) dp_blas_set_num_threads(initial.blas_threads);
  if (initial.has_impl) dp_sgemm_set_impl(initial.impl);
  const dp_backend *cuda = dp_backend_get(DP_CUDA);
  if (cuda && cuda->set_option) {
    const char *tf32 = getenv("DDPLUA_TF32"), *sync = getenv("DDPLUA_CUDA_SYNC"); /* as the plugin reads them */
    cuda->set_option("tf32", tf32 && *tf32 && strcmp(tf32, "0") != 0 ? 1.0 : 0.0);
    cuda->set_option("sync", sync && *sync && strcmp(sync, "0") != 0 ? 1.0 : 0.0);
  }
}

/* strong references: a weak one would not pull the object out of the static runtime */
void lt_open_dist(lua_State *L, int module);
void lt_open_io(lua_State *L, int module);
void lt_open_image(lua_State *L, int module); /* core.image (l_data_image.c) */

int luaopen_ddplua_core(lua_State *L);
int luaopen_ddplua_core(lua_State *L) {
  static const luaL_Reg funcs[] = {{"manual_seed", l_manual_seed},
                                   {"initial_seed", l_initial_seed},
                                   {"get_rng_state", l_get_rng_state},
                                   {"set_rng_state", l_set_rng_state},
                                   {"set_grad_enabled", l_set_grad_enabled},
                                   {"is_grad_enabled", l_is_grad_enabled},
                                   {"clock", l_clock},
                                   {"memory_stats", l_memory_stats},
                                   {"empty_cache", l_empty_cache},
                                   {"blas_info", l_blas_info},
                                   {"set_num_threads", l_set_num_threads},
                                   {"get_num_threads", l_get_num_threads},
                                   {"set_flush_denormal", l_set_flush_denormal},
                                   {"_get_flush_denormal", l_get_flush_denormal},
                                   {"cpu_info", l_cpu_info},
                                   {"_fma_peak", l_fma_peak},
                                   {"_memcpy_gbs", l_memcpy_gbs},
                                   {"onednn_info", l_onednn_info},
                                   {"set_onednn", l_set_onednn},
                                   {"_onednn_calls", l_onednn_calls},
                                   {"set_conv_winograd", l_set_conv_winograd},
                                   {"_onednn_winograd_calls", l_onednn_winograd_calls},
                                   {"set_conv_narrow_grad", l_set_conv_narrow_grad},
                                   {"_conv_narrow_grad_calls", l_conv_narrow_grad_calls},
                                   {"_onednn_bf16_conv_calls", l_onednn_bf16_conv_calls},
                                   {"set_cpu_kernels", l_set_cpu_kernels},
                                   {"set_attention_amx", l_set_attention_amx},
                                   {"attention_bf16", l_attention_bf16},
                                   {"gemm_impl", l_gemm_impl},
                                   {"set_gemm_impl", l_set_gemm_impl},
                                   {"set_gemm_stats", l_set_gemm_stats},
                                   {"gemm_stats", l_gemm_stats},
                                   {"reset_gemm_stats", l_reset_gemm_stats},
                                   {"cuda_is_available", l_cuda_available},
                                   {"cuda_device_count", l_cuda_device_count},
                                   {"synchronize", l_synchronize},
                                   {"gc_pace", l_collectgarbage_paced},
                                   {"_gc_counts", l_gc_counts},
                                   {"keep", l_keep},
                                   {NULL, NULL}};
  /* flush denormals on the thread that runs the Lua state (cpu_fpu.h) */
  dp_fpu_sync();
  /* young collections free each step's tensors cheaply (see lt_gc_pace) */
  lua_gc(L, LUA_GCGEN, 0, 0);
  wrap_collectgarbage(L);
  lua_newtable(L); /* module */
  int module = lua_gettop(L);
  luaL_setfuncs(L, funcs, 0);
  lua_newtable(L); /* tensor methods */
  int methods = lua_gettop(L);
  lt_open_tensor(L, module, methods);
  lt_open_tensor_ops(L, module, methods);
  lt_open_nn_ops(L, module, methods);
  lt_open_model_ops(L, module, methods);
  lt_open_nn_support(L, module);
  lt_open_autograd_function(L, module);
  lt_open_optim(L, module);
  lt_open_data(L, module);
  lt_open_dist(L, module);
  lt_open_ddp(L, module);
  lt_open_io(L, module);
  lt_open_cuda(L, module);
  lt_open_image(L, module);
  lua_pushvalue(L, methods);
  lua_setfield(L, module, "Tensor");
  lua_settop(L, module);
  return 1;
}
