/* Choice of the per-ISA float32 kernels (cpu_vec.h) and the CPU's
 * description for benchmarks. */
#include "backends/cpu/cpu_vec.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

bool dp_cpu_vec_supported(const dp_cpu_vec *v) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (v == &dp_cpu_vec_avx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c");
  if (v == &dp_cpu_vec_avx2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") &&
           __builtin_cpu_supports("f16c");
  return v == &dp_cpu_vec_base;
#else
  return v == &dp_cpu_vec_base;
#endif
}

static const dp_cpu_vec *best(void) {
  if (dp_cpu_vec_supported(&dp_cpu_vec_avx512)) return &dp_cpu_vec_avx512;
  if (dp_cpu_vec_supported(&dp_cpu_vec_avx2)) return &dp_cpu_vec_avx2;
  return &dp_cpu_vec_base;
}

static const dp_cpu_vec *current; /* atomic pointer */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char env_err[200];

static int parse(const char *name, const dp_cpu_vec **out) {
  const dp_cpu_vec *v = NULL;
  if (strcmp(name, "auto") == 0) v = best();
  else if (strcmp(name, "avx512") == 0) v = &dp_cpu_vec_avx512;
  else if (strcmp(name, "avx2") == 0) v = &dp_cpu_vec_avx2;
  else if (strcmp(name, "base") == 0) v = &dp_cpu_vec_base;
  else return dp_error("CPU kernels: '%.40s' is not one of auto, avx512, avx2, base", name);
  if (!dp_cpu_vec_supported(v)) return dp_error("CPU kernels: this CPU cannot run the %s kernels", v->name);
  *out = v;
  return 0;
}

static void init(void) {
  const dp_cpu_vec *v = best();
  const char *e = getenv("DDPLUA_CPU_ISA");
  if (e && *e && parse(e, &v)) { /* a bad value: say so once, keep the best */
    snprintf(env_err, sizeof env_err, "DDPLUA_CPU_ISA: %s", dp_errmsg());
    fprintf(stderr, "ddplua: %s; using %s\n", env_err, v->name);
  }
  __atomic_store_n(&current, v, __ATOMIC_RELEASE);
}

const dp_cpu_vec *dp_cpu_vec_get(void) {
  const dp_cpu_vec *v = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  if (v) return v;
  pthread_once(&once, init);
  return __atomic_load_n(&current, __ATOMIC_ACQUIRE);
}

int dp_cpu_vec_set(const char *name) {
  pthread_once(&once, init);
  const dp_cpu_vec *v = NULL;
  if (parse(name, &v)) return -1;
  __atomic_store_n(&current, v, __ATOMIC_RELEASE);
  return 0;
}

/* ---- the CPU, for benchmark headers ---- */

static char desc[480];
static pthread_once_t desc_once = PTHREAD_ONCE_INIT;

static void describe(void) {
  char model[160] = "unknown CPU", flags_line[8192] = "";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[8192];
    bool have_model = false, have_flags = false;
    while ((!have_model || !have_flags) && fgets(line, sizeof line, f)) {
      char *colon = strchr(line, ':');
      if (!colon) continue;
      char *val = colon + 1 + (colon[1] == ' ');
      val[strcspn(val, "\n")] = 0;
      if (!have_model && strncmp(line, "model name", 10) == 0) {
        snprintf(model, sizeof model, "%s", val);
        have_model = true;
      } else if (!have_flags && (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0)) {
        snprintf(flags_line, sizeof flags_line, " %s ", val);
        have_flags = true;
      }
    }
    fclose(f);
  }
  /* the features the kernels and the libraries (oneDNN) dispatch on */
  static const char *const wanted[] = {"avx2",        "fma",         "avx512f",     "avx512bw", "avx512dq",
                                       "avx512vl",    "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile",
                                       "avx512_fp16", "asimd",       "sve"};
  char feats[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
    char key[32];
    snprintf(key, sizeof key, " %s ", wanted[i]);
    if (strstr(flags_line, key))
      used += (size_t)snprintf(feats + used, sizeof feats - used, "%s%s", used ? " " : "", wanted[i]);
    if (used >= sizeof feats) break;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(desc, sizeof desc, "%s, %ld cpus | %s", model, cores, used ? feats : "no SIMD extensions listed");
}

const char *dp_cpu_describe(void) {
  static _Thread_local char out[512];
  pthread_once(&desc_once, describe);
  snprintf(out, sizeof out, "%s | kernels %s", desc, dp_cpu_vec_get()->name);
  return out;
}
