/* Denormal floats: flush-to-zero (FTZ: a denormal result becomes 0) and
 * denormals-are-zero (DAZ: a denormal input reads as 0) on every thread
 * ddplua computes on, on by default as CUDA's fast paths and
 * torch.set_flush_denormal(True) do. A float32 operation that meets a
 * denormal costs ~100 cycles instead of ~4 on x86 (a microcode assist), and
 * training drives weights and gradients into that range (momentum buffers
 * decaying towards 0): an MLP that ran 27k samples/s in its first epoch ran
 * 12k by the fourth without it, with the same accuracy to the last digit.
 *
 * The setting is per process (dp_fpu_set_flush_denormal); each thread puts
 * it into its own control register (MXCSR on x86-64, FPCR.FZ on AArch64)
 * with dp_fpu_sync: the threads ddplua starts call it when they start and
 * before each task (GEMM pool, parallel loops, communication thread, image
 * decode workers), so a change reaches them at their next task. Threads
 * inherit the register from the thread that creates them, and forked
 * processes (DataLoader workers) from the forking thread. */
#ifndef DP_CPU_FPU_H
#define DP_CPU_FPU_H

#include <stdbool.h>

/* Whether this CPU and build can flush denormals (x86-64 with SSE2,
 * AArch64). */
bool dp_fpu_flush_supported(void);
/* Sets the process-wide setting and applies it to the calling thread;
 * returns dp_fpu_flush_supported() (PyTorch's torch.set_flush_denormal). */
bool dp_fpu_set_flush_denormal(bool on);
/* The process-wide setting. */
bool dp_fpu_get_flush_denormal(void);
/* Puts the process-wide setting into the calling thread's control
 * register (a few cycles when it is there already). */
void dp_fpu_sync(void);
/* Whether the calling thread's control register flushes now. */
bool dp_fpu_thread_flushes(void);

#endif
