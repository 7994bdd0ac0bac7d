/* Error reporting for the C runtime.
 *
 * Runtime functions never abort on bad input: they record a message in a
 * thread-local buffer and return NULL / -1. The Lua binding layer turns that
 * into a Lua error (src/lua/l_util.h: lt_error, LT_CHECK), C tests read it with
 * dp_errmsg(). Internal invariants that cannot be caused by a user use
 * DP_ASSERT, which reports file and line and aborts (llm.c's check macros). */
#ifndef DP_ERROR_H
#define DP_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define DP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DP_PRINTF(a, b)
#endif

/* Records a message (printf-style) for the calling thread. Always returns -1
 * so that `return dp_error(...)` works in int-returning functions. */
int dp_error(const char *fmt, ...) DP_PRINTF(1, 2);
/* Appends context to the current message: "matmul: " + message. */
void dp_error_prefix(const char *prefix);
const char *dp_errmsg(void);
void dp_error_clear(void);

#define DP_ASSERT(cond)                                                                                                \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "ddplua: internal error at %s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
      abort();                                                                                                         \
    }                                                                                                                  \
  } while (0)

/* Allocation that cannot fail silently: out of host memory for bookkeeping
 * structures is not recoverable in any useful way. Tensor data allocations
 * go through the allocator and report errors instead. */
void *dp_xmalloc(size_t n);
void *dp_xcalloc(size_t n, size_t m);
void *dp_xrealloc(void *p, size_t n);
char *dp_xstrdup(const char *s);

#endif
