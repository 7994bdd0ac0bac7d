/* IDX reader over zlib's gz* interface, which reads gzip'd and plain files
 * alike. The payload is read straight into the tensor's memory.
 *
 * Decompressing Fashion-MNIST's training images takes ~150 ms, every run and
 * on every rank; dp_idx_load_cached keeps the plain IDX file in a cache
 * directory (named after the source's path, size and mtime, so an edited
 * source is read afresh) and reads that instead, in ~20 ms. */
#include "data/idx.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"

#define IDX_UBYTE 0x08
#define IDX_MAXDIM 4

/* Reads up to n bytes; returns the count, or -1 after dp_error for a zlib
 * error (a truncated or corrupt gzip stream). */
static int64_t read_bytes(gzFile f, const char *path, void *dst, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    int64_t want = n - got > (1 << 30) ? (1 << 30) : n - got;
    int r = gzread(f, (char *)dst + got, (unsigned)want);
    if (r < 0) {
      int errnum;
      const char *msg = gzerror(f, &errnum);
      return dp_error("%s: corrupt gzip data (%s)", path, errnum == Z_ERRNO ? strerror(errno) : msg);
    }
    if (r == 0) {
      int errnum;
      const char *msg = gzerror(f, &errnum);
      /* zlib reports a stream cut short as Z_BUF_ERROR at end of file */
      if (errnum != Z_OK) return dp_error("%s: corrupt or truncated gzip data (%s)", path, msg);
      break;
    }
    got += r;
  }
  return got;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

dp_tensor *dp_idx_load(const char *path) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    dp_error("%s: cannot open (%s)", path, errno ? strerror(errno) : "out of memory");
    return NULL;
  }
  gzbuffer(f, 1 << 17);
  dp_tensor *t = NULL;
  unsigned char head[4 + 4 * IDX_MAXDIM];
  int64_t got = read_bytes(f, path, head, 4);
  if (got < 0) goto out;
  if (got < 4) {
    dp_error("%s: not an IDX file (only %" PRId64 " bytes)", path, got);
    goto out;
  }
  if (head[0] != 0 || head[1] != 0) {
    dp_error("%s: not an IDX file (magic bytes 0x%02x 0x%02x, expected 0x00 0x00)", path, head[0], head[1]);
    goto out;
  }
  if (head[2] != IDX_UBYTE) {
    dp_error("%s: IDX element type 0x%02x is not supported (expected 0x08, unsigned bytes)", path, head[2]);
    goto out;
  }
  int ndim = head[3];
  if (ndim < 1 || ndim > IDX_MAXDIM) {
    dp_error("%s: IDX header gives %d dimensions (expected 1..%d)", path, ndim, IDX_MAXDIM);
    goto out;
  }
  got = read_bytes(f, path, head + 4, 4 * ndim);
  if (got < 0) goto out;
  if (got < 4 * ndim) {
    dp_error("%s: truncated IDX header (%d dimension sizes expected)", path, ndim);
    goto out;
  }
  int64_t shape[IDX_MAXDIM];
  for (int d = 0; d < ndim; d++) shape[d] = be32(head + 4 + 4 * d);
  t = dp_empty(DP_U8, ndim, shape, dp_cpu());
  if (!t) goto out;
  int64_t n = dp_numel(t);
  got = read_bytes(f, path, dp_data(t), n);
  if (got < 0) {
    dp_clear(&t);
    goto out;
  }
  if (got < n) {
    char s[128];
    dp_error("%s: truncated: the header says %s (%" PRId64 " bytes of data) but the file holds %" PRId64, path,
             dp_shape_str(t, s, sizeof s), n, got);
    dp_clear(&t);
    goto out;
  }
  unsigned char extra;
  got = read_bytes(f, path, &extra, 1);
  if (got != 0) {
    if (got > 0) dp_error("%s: unexpected bytes after the %" PRId64 " bytes of data the header announces", path, n);
    dp_clear(&t);
  }
out:
  gzclose(f);
  return t;
}

/* mkdir -p; 0 when the directory is there at the end */
static int make_dirs(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p) return -1;
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char c = p[i];
    p[i] = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    p[i] = c;
  }
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* Writes t as a plain IDX file at path, through a temporary file renamed
 * into place: a reader sees the whole file or none. 0 or -1. */
static int idx_write(const char *path, const dp_tensor *t) {
  char tmp[4200];
  if (t->ndim < 1 || t->ndim > IDX_MAXDIM) return -1;
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) return -1;
  FILE *f = fopen(tmp, "wb");
  if (!f) return -1;
  unsigned char head[4 + 4 * IDX_MAXDIM] = {0, 0, IDX_UBYTE, (unsigned char)t->ndim};
  for (int d = 0; d < t->ndim && d < IDX_MAXDIM; d++) {
    uint32_t v = (uint32_t)t->shape[d];
    unsigned char *q = head + 4 + 4 * d;
    q[0] = (unsigned char)(v >> 24);
    q[1] = (unsigned char)(v >> 16);
    q[2] = (unsigned char)(v >> 8);
    q[3] = (unsigned char)v;
  }
  size_t hn = 4 + 4 * (size_t)t->ndim, n = (size_t)dp_numel(t);
  bool ok = fwrite(head, 1, hn, f) == hn && fwrite(dp_data(t), 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

dp_tensor *dp_idx_load_cached(const char *path, const char *cache_dir) {
  size_t len = strlen(path);
  struct stat st;
  if (!cache_dir || !*cache_dir || len < 4 || strcmp(path + len - 3, ".gz") != 0 || stat(path, &st) != 0)
    return dp_idx_load(path);
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  /* the source's absolute path goes into the name as a hash: MNIST and
   * Fashion-MNIST, say, share file names */
  char abs[PATH_MAX], cached[4096];
  const char *where = realpath(path, abs) ? abs : path;
  uint64_t h = 14695981039346656037ull;
  for (const char *c = where; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
  int w = snprintf(cached, sizeof cached, "%s/%.*s.%llx-%llx-%016llx.idx", cache_dir, (int)(strlen(base) - 3), base,
                   (unsigned long long)st.st_size,
                   (unsigned long long)st.st_mtim.tv_sec * 1000000000ull + (unsigned long long)st.st_mtim.tv_nsec,
                   (unsigned long long)h);
  if (w < 0 || w >= (int)sizeof cached) return dp_idx_load(path);
  if (access(cached, R_OK) == 0) {
    dp_tensor *t = dp_idx_load(cached);
    if (t) return t;
    unlink(cached); /* unreadable or damaged: read the source, write it again */
  }
  dp_tensor *t = dp_idx_load(path);
  /* best effort: a cache that cannot be written costs only the speed-up */
  if (t && make_dirs(cache_dir) == 0) idx_write(cached, t);
  return t;
}
