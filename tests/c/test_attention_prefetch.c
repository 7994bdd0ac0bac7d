/* The CPU attention's prefetch cursor (backends/cpu/cpu_attention_prefetch.h)
 * with its line hint recorded instead of issued: over rows at odd offsets
 * and strides it names every cache line the rows touch, each once, no line
 * outside them, with each range's read or write flag; a slice issues at
 * most its quota and the slices finish the rows; rows past the size limit,
 * empty ranges and ranges past the table's room are not issued. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { MAXLINES = 100000 };
static uintptr_t lines[MAXLINES];
static bool writes[MAXLINES];
static int nlines;
#define PF_LINE(p, write)                                                                                              \
  do {                                                                                                                 \
    if (nlines < MAXLINES) lines[nlines] = (uintptr_t)(p), writes[nlines] = (write);                                   \
    nlines++;                                                                                                          \
  } while (0)
#define INLINE static inline
#include "backends/cpu/cpu_attention_prefetch.h"

static char buf[1 << 20] __attribute__((aligned(64)));

typedef struct {
  int64_t off, rs, es, r0, rows, cols;
  bool write;
} range;

/* every byte of every row covered by exactly one recorded line, each line 64-aligned, touching a row of its
 * range, with that range's flag; returns the number of lines the rows span */
static int64_t check_cover(const range *rg, int n) {
  int64_t want = 0;
  for (int i = 0; i < nlines; i++) CHECK(lines[i] % 64 == 0);
  for (int g = 0; g < n; g++)
    for (int64_t r = rg[g].r0; r < rg[g].r0 + rg[g].rows; r++) {
      uintptr_t lo = (uintptr_t)(buf + rg[g].off + r * rg[g].rs * rg[g].es);
      uintptr_t hi = lo + (uintptr_t)(rg[g].cols * rg[g].es); /* one past the row */
      for (uintptr_t l = lo / 64 * 64; l < hi; l += 64) {
        want++;
        int seen = 0;
        for (int i = 0; i < nlines; i++)
          if (lines[i] == l && writes[i] == rg[g].write) seen++;
        CHECK(seen >= 1); /* two ranges or rows may share a line: each names it */
      }
    }
  CHECK(nlines == want); /* and nothing else */
  return want;
}

static void add_all(pf_cursor *c, const range *rg, int n) {
  for (int g = 0; g < n; g++)
    pf_add(c, buf + rg[g].off, rg[g].rs, rg[g].es, rg[g].r0, rg[g].rows, rg[g].cols, rg[g].write);
}

int main(void) {
  /* rows at odd offsets (4, 60 bytes into a line), strides of 384 floats, 33 floats, 100 bf16, a 1-element row */
  const range rg[] = {
      {4, 384, 4, 0, 37, 32, false},
      {60, 33, 4, 5, 20, 33, false},
      {0, 100, 2, 1, 9, 100, true},
      {64 * 1000 + 12, 7, 4, 0, 3, 1, true},
  };
  const int n = (int)(sizeof rg / sizeof rg[0]);

  { /* one flush: all lines */
    pf_cursor c = {0};
    add_all(&c, rg, n);
    pf_start(&c, 0);
    nlines = 0;
    pf_issue(&c, true);
    check_cover(rg, n);
    int before = nlines;
    pf_issue(&c, true); /* finished: nothing more */
    CHECK(nlines == before);
  }
  { /* slices: each at most its quota, together the same lines */
    pf_cursor c = {0};
    add_all(&c, rg, n);
    pf_start(&c, 7);
    CHECK(c.quota >= 1);
    nlines = 0;
    int calls = 0;
    while (c.i < c.n && calls < 10000) {
      int before = nlines;
      pf_issue(&c, false);
      CHECK(nlines - before <= c.quota);
      CHECK(nlines > before);
      calls++;
    }
    int64_t want = check_cover(rg, n);
    CHECK(calls == (int)((want + c.quota - 1) / c.quota));
  }
  { /* past the size limit: nothing */
    pf_cursor c = {0};
    pf_add(&c, buf, 1024, 4, 0, PF_MAX_BYTES / 4096 + 1, 1024, false);
    pf_start(&c, 4);
    nlines = 0;
    pf_issue(&c, true);
    CHECK(nlines == 0);
  }
  { /* empty ranges, a NULL base, and ranges past the table's room are left out */
    pf_cursor c = {0};
    pf_add(&c, buf, 8, 4, 0, 0, 8, false);
    pf_add(&c, buf, 8, 4, 0, 4, 0, false);
    pf_add(&c, NULL, 8, 4, 0, 4, 8, false);
    CHECK(c.n == 0 && c.total == 0);
    for (int i = 0; i < PF_RANGES + 3; i++) pf_add(&c, buf + 4096 * i, 16, 4, 0, 1, 16, false);
    CHECK(c.n == PF_RANGES);
    pf_start(&c, 1);
    nlines = 0;
    pf_issue(&c, true);
    CHECK(nlines == PF_RANGES); /* one 64-byte row each */
  }
  TEST_DONE();
}
