/* IDX reader over zlib's gz* interface, which reads gzip'd and plain files
 * alike. The payload is read straight into the tensor's memory. */
#include "data/idx.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
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
