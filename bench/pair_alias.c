/* The two-rank in-place all_reduce's loop (a[i] = b[i] = a[i] + b[i], as
 * dp_reduce_pair_inplace) over two 2 MiB arrays placed at several distances
 * apart in one mapping: why shm.c starts the ranks' pools 1 GiB + 68 KiB
 * apart. Prints the best of 50 passes per distance.
 *   gcc -O3 -o /tmp/pair_alias bench/pair_alias.c && /tmp/pair_alias */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void pair(float *restrict a, float *restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] = b[i] = a[i] + b[i];
}

int main(void) {
  const size_t n = 524288, GiB = (size_t)1 << 30;
  char *m = mmap(NULL, 4 * GiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return perror("mmap"), 1;
  char *base = (char *)(((uintptr_t)m + GiB - 1) & ~(uintptr_t)(GiB - 1));
  const size_t gaps[] = {(size_t)1 << 19, (size_t)1 << 24, (size_t)1 << 28, GiB,
                         GiB + 64,        GiB + 4096,      GiB + (68 << 10)};
  for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
    float *a = (float *)base, *b = (float *)(base + gaps[g]);
    memset(a, 0, n * 4), memset(b, 0, n * 4);
    double best = 1e9;
    for (int r = 0; r < 50; r++) {
      double t = now();
      pair(a, b, n);
      t = now() - t;
      if (t < best) best = t;
    }
    printf("arrays %#12zx bytes apart: %.3f ms\n", gaps[g], best * 1e3);
  }
  return 0;
}
