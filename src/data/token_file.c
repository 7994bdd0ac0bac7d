/* Token files (see token_file.h): mmap for reading, a temporary file and a
 * rename for writing. */
#include "data/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "ops/philox.h"

struct dp_token_file {
  const uint8_t *data;
  size_t nbytes;
  int elsize;
  int64_t len;
};

dp_token_file *dp_token_file_open(const char *path, int elsize) {
  if (elsize != 1 && elsize != 2) {
    dp_error("token file: element size must be 1 (uint8) or 2 (uint16), got %d", elsize);
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    dp_error("%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    dp_error("%s: not a regular file", path);
    close(fd);
    return NULL;
  }
  if (st.st_size == 0 || st.st_size % elsize != 0) {
    dp_error("%s: %lld bytes is %s (a token file of %s holds %d byte(s) per token)", path, (long long)st.st_size,
             st.st_size == 0 ? "empty" : "not a whole number of tokens", elsize == 1 ? "uint8" : "uint16", elsize);
    close(fd);
    return NULL;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    dp_error("%s: cannot map: %s", path, strerror(errno));
    return NULL;
  }
  madvise(p, (size_t)st.st_size, MADV_RANDOM); /* windows are read at random places */
  dp_token_file *f = dp_xcalloc(1, sizeof *f);
  f->data = p;
  f->nbytes = (size_t)st.st_size;
  f->elsize = elsize;
  f->len = (int64_t)(st.st_size / elsize);
  return f;
}

void dp_token_file_close(dp_token_file *f) {
  if (!f) return;
  munmap((void *)f->data, f->nbytes);
  free(f);
}

int64_t dp_token_file_len(const dp_token_file *f) { return f->len; }

static inline int64_t token_at(const dp_token_file *f, int64_t i) {
  if (f->elsize == 1) return f->data[i];
  uint16_t v; /* little-endian on disk, as numpy writes it on x86 and arm */
  v = (uint16_t)(f->data[2 * i] | (f->data[2 * i + 1] << 8));
  return v;
}

int dp_token_file_windows(const dp_token_file *f, const int64_t *starts, int64_t n, int64_t block, int64_t *x,
                          int64_t *y) {
  if (block < 1 || block == INT64_MAX) return dp_error("token file: block_size must be positive, got %" PRId64, block);
  int64_t need = block + (y ? 1 : 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t s = starts[i];
    if (s < 0 || need > f->len || s > f->len - need) /* s + need could overflow */
      return dp_error("window start %" PRId64 " (batch position %" PRId64 ") is out of range: the file has %" PRId64
                      " tokens, so starts are 1..%" PRId64 " for block_size %" PRId64,
                      s + 1, i + 1, f->len, f->len - need + 1, block);
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t s = starts[i];
    int64_t *xo = x + i * block, *yo = y ? y + i * block : NULL;
    if (f->elsize == 1) {
      const uint8_t *p = f->data + s;
      for (int64_t t = 0; t < block; t++) xo[t] = (int64_t)p[t] + 1;
      if (yo)
        for (int64_t t = 0; t < block; t++) yo[t] = (int64_t)p[t + 1] + 1;
    } else {
      for (int64_t t = 0; t < block; t++) xo[t] = token_at(f, s + t) + 1;
      if (yo)
        for (int64_t t = 0; t < block; t++) yo[t] = token_at(f, s + t + 1) + 1;
    }
  }
  return 0;
}

void dp_token_file_random_starts(int64_t range, uint64_t seed, uint64_t offset, int64_t n, int64_t *starts) {
  for (int64_t i = 0; i < n; i++) {
    dp_philox4 r = dp_philox(seed, offset + (uint64_t)i);
    uint64_t v = ((uint64_t)r.v[0] << 32) | r.v[1];
    starts[i] = (int64_t)(v % (uint64_t)range);
  }
}

int dp_token_file_write(const char *path, const int64_t *ids, int64_t n, int elsize) {
  if (elsize != 1 && elsize != 2)
    return dp_error("token file: element size must be 1 (uint8) or 2 (uint16), got %d", elsize);
  int64_t max = elsize == 1 ? 256 : 65536;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 1 || ids[i] > max)
      return dp_error("id %" PRId64 " at position %" PRId64 " does not fit a %s token file (ids 1..%" PRId64 ")",
                      ids[i], i + 1, elsize == 1 ? "uint8" : "uint16", max);
  size_t plen = strlen(path);
  char *tmp = dp_xmalloc(plen + 32);
  snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int rc = dp_error("%s: cannot write: %s", path, strerror(errno));
    free(tmp);
    return rc;
  }
  enum { CHUNK = 1 << 16 };
  uint8_t *buf = dp_xmalloc((size_t)CHUNK * 2);
  int rc = 0;
  for (int64_t i = 0; i < n && !rc;) {
    int64_t k = n - i < CHUNK ? n - i : CHUNK;
    for (int64_t j = 0; j < k; j++) {
      uint64_t v = (uint64_t)(ids[i + j] - 1);
      if (elsize == 1) buf[j] = (uint8_t)v;
      else {
        buf[2 * j] = (uint8_t)(v & 0xff);
        buf[2 * j + 1] = (uint8_t)(v >> 8);
      }
    }
    size_t left = (size_t)k * (size_t)elsize;
    const uint8_t *p = buf;
    while (left > 0) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = dp_error("%s: cannot write: %s", path, strerror(errno));
        break;
      }
      p += w;
      left -= (size_t)w;
    }
    i += k;
  }
  free(buf);
  if (!rc && fsync(fd) != 0) rc = dp_error("%s: cannot write: %s", path, strerror(errno));
  if (close(fd) != 0 && !rc) rc = dp_error("%s: cannot write: %s", path, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = dp_error("%s: cannot rename into place: %s", path, strerror(errno));
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}
