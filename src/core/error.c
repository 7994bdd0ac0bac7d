#include "core/error.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char errbuf[1024];

int dp_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return -1;
}

void dp_error_prefix(const char *prefix) {
  char tmp[sizeof errbuf];
  snprintf(tmp, sizeof tmp, "%s%s", prefix, errbuf);
  memcpy(errbuf, tmp, sizeof errbuf);
}

const char *dp_errmsg(void) { return errbuf[0] ? errbuf : "unknown error"; }
void dp_error_clear(void) { errbuf[0] = 0; }

static void oom(size_t n) {
  fprintf(stderr, "ddplua: out of memory allocating %zu bytes\n", n);
  abort();
}

void *dp_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  return p;
}
void *dp_xcalloc(size_t n, size_t m) {
  void *p = calloc(n ? n : 1, m ? m : 1);
  if (!p) oom(n * m);
  return p;
}
void *dp_xrealloc(void *q, size_t n) {
  void *p = realloc(q, n ? n : 1);
  if (!p) oom(n);
  return p;
}
char *dp_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = dp_xmalloc(n);
  memcpy(p, s, n);
  return p;
}
