/* The CPU attention's prefetch of the next task's rows (included by
 * cpu_attention.c, and by tests/c/test_attention_prefetch.c, which defines
 * PF_LINE to record the lines instead).
 *
 * A task (a head's query block forward, a head backward) reads its rows of
 * Q, K, V (and dO, O) and writes its rows of the output (dQ, dK, dV) in the
 * caller's [B, T, ...] layout, where one head's rows are a strided slice of
 * a tensor several MiB large (the GPT example's qkv is 16 x 128 x 384
 * floats, 3 MiB), so each task found its rows in the L3 and waited on every
 * first load of a line: the GPT layer's forward + backward took 6.3 ms at
 * B = 16 against 4.3 ms a batch-16 equivalent at B = 1 (all of it in the
 * L2), and the K transposes that make the first loads took a tenth of it.
 * While a task computes, its part of the thread split issues the next
 * task's lines to the L2 a slice at a time (pf_issue per strip), so their
 * misses overlap the FMAs instead of stalling them; the slices spread the
 * requests, where issuing them all at once would fill the miss buffers.
 * Skipped when the next task's rows exceed PF_MAX_BYTES: they would evict
 * the current task's tiles from the L2. */
#include <stdbool.h>
#include <stdint.h>

enum { PF_RANGES = 8, PF_MAX_BYTES = 256 * 1024 };

/* one line towards the L2, for writing or reading (tests/c/test_attention_prefetch.c records them instead) */
#ifndef PF_LINE
#define PF_LINE(p, write) ((write) ? __builtin_prefetch((p), 1, 2) : __builtin_prefetch((p), 0, 2))
#endif

typedef struct {
  const char *base[PF_RANGES];
  int64_t rs[PF_RANGES], rows[PF_RANGES], bytes[PF_RANGES];
  bool write[PF_RANGES];
  int n, i;      /* ranges, the range being issued */
  int64_t r, b;  /* its row and byte offset */
  int64_t total; /* bytes over all ranges */
  int64_t quota; /* lines per pf_issue */
} pf_cursor;

/* rows r0.. (rows of cols elements) of the head at base (row stride rs elements of es bytes) */
INLINE void pf_add(pf_cursor *c, const char *base, int64_t rs, int64_t es, int64_t r0, int64_t rows, int64_t cols,
                   bool write) {
  if (!base || rows <= 0 || cols <= 0 || c->n == PF_RANGES) return;
  c->base[c->n] = base + r0 * rs * es;
  c->rs[c->n] = rs * es;
  c->rows[c->n] = rows;
  c->bytes[c->n] = cols * es;
  c->write[c->n] = write;
  c->total += rows * cols * es;
  c->n++;
}

/* ready to issue over about `slices` calls; off when the rows are too many for the L2 */
INLINE void pf_start(pf_cursor *c, int64_t slices) {
  if (c->total > PF_MAX_BYTES) c->n = 0;
  int64_t lines = c->total / 64 + c->n;
  c->quota = slices > 0 ? (lines + slices - 1) / slices : lines;
}

/* up to quota more lines (all that are left with flush); a row's lines from the one holding its first byte */
INLINE void pf_issue(pf_cursor *c, bool flush) {
  for (int64_t k = 0; c->i < c->n && (flush || k < c->quota); k++) {
    const char *row = c->base[c->i] + c->r * c->rs[c->i];
    const char *line = row - (uintptr_t)row % 64 + c->b;
    PF_LINE(line, c->write[c->i]);
    c->b += 64;
    if (line + 64 >= row + c->bytes[c->i]) {
      c->b = 0;
      if (++c->r == c->rows[c->i]) c->r = 0, c->i++;
    }
  }
}
