/* Fault injection for hostile_spec (LD_PRELOAD): in rank 1 (RANK=1), opening
 * the node's shared-memory segment (shm_open of a ddplua name, or open of
 * the leader's /proc/<pid>/fd/<n>) waits 2 s first, so that a kill -9 of
 * the host surely lands while rank 0 holds a segment rank 1 has not mapped. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int late(const char *path) {
  const char *rank = getenv("RANK");
  if (!rank || strcmp(rank, "1") != 0 || !path) return 0;
  return strstr(path, "ddplua-") != NULL || (strncmp(path, "/proc/", 6) == 0 && strstr(path, "/fd/") != NULL);
}

int shm_open(const char *name, int oflag, mode_t mode) {
  int (*real)(const char *, int, mode_t) = (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
  if (!(oflag & O_CREAT) && late(name)) sleep(2);
  return real(name, oflag, mode);
}

static int open_with(const char *sym, const char *path, int flags, mode_t mode) {
  int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, sym);
  if (late(path)) sleep(2);
  return real(path, flags, mode);
}

int open(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return open_with("open", path, flags, mode);
}

int open64(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return open_with("open64", path, flags, mode);
}
