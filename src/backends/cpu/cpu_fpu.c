/* Flush-to-zero / denormals-are-zero per thread (see cpu_fpu.h). */
#include "backends/cpu/cpu_fpu.h"

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define DP_FPU_X86 1
/* MXCSR bit 15 flushes denormal results (FTZ), bit 6 treats denormal
 * inputs as zero (DAZ); every x86-64 CPU with SSE2 has both. */
#define MXCSR_FTZ_DAZ 0x8040u
#elif defined(__aarch64__)
#define DP_FPU_ARM 1
/* FPCR.FZ (bit 24) does both for single and double precision. */
#define FPCR_FZ (1ull << 24)
#endif

static int want = 1; /* atomic: read by every thread before each task */

bool dp_fpu_flush_supported(void) {
#if defined(DP_FPU_X86) || defined(DP_FPU_ARM)
  return true;
#else
  return false;
#endif
}

static void apply(bool on) {
#if defined(DP_FPU_X86)
  unsigned cur = _mm_getcsr(), next = on ? cur | MXCSR_FTZ_DAZ : cur & ~MXCSR_FTZ_DAZ;
  if (next != cur) _mm_setcsr(next);
#elif defined(DP_FPU_ARM)
  uint64_t cur, next;
  __asm__ volatile("mrs %0, fpcr" : "=r"(cur));
  next = on ? cur | FPCR_FZ : cur & ~FPCR_FZ;
  if (next != cur) __asm__ volatile("msr fpcr, %0" : : "r"(next));
#else
  (void)on;
#endif
}

bool dp_fpu_set_flush_denormal(bool on) {
  __atomic_store_n(&want, on ? 1 : 0, __ATOMIC_RELEASE);
  apply(on);
  return dp_fpu_flush_supported();
}

bool dp_fpu_get_flush_denormal(void) { return __atomic_load_n(&want, __ATOMIC_ACQUIRE) != 0; }

void dp_fpu_sync(void) { apply(dp_fpu_get_flush_denormal()); }

bool dp_fpu_thread_flushes(void) {
#if defined(DP_FPU_X86)
  return (_mm_getcsr() & MXCSR_FTZ_DAZ) == MXCSR_FTZ_DAZ;
#elif defined(DP_FPU_ARM)
  uint64_t cur;
  __asm__ volatile("mrs %0, fpcr" : "=r"(cur));
  return (cur & FPCR_FZ) != 0;
#else
  return false;
#endif
}
