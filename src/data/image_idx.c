/* IDX files (the MNIST / Fashion-MNIST format): a big-endian header of
 * magic 0x00 0x00 <type> <ndim>, ndim 32-bit sizes, then the data. zlib's
 * gzread reads gzip-compressed and plain files alike. Only unsigned bytes
 * (type 0x08) are read: that is what image and label files hold. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "data/image_decode.h"
#include "tensor/tensor.h"

static int read_exact(gzFile g, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
    int k = gzread(g, (char *)buf + got, chunk);
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

int dp_image_read_idx(const char *path, int64_t limit, int *ndim, int64_t dims[4], uint8_t **data) {
  *data = NULL;
  gzFile g = gzopen(path, "rb");
  if (!g) return dp_error("IDX file '%s': cannot open: %s", path, errno ? strerror(errno) : "out of memory");
  gzbuffer(g, 1 << 17);
  uint8_t magic[4];
  if (read_exact(g, magic, 4)) {
    gzclose(g);
    return dp_error("IDX file '%s': truncated header (or not an IDX file)", path);
  }
  if (magic[0] != 0 || magic[1] != 0 || magic[3] < 1 || magic[3] > 4) {
    gzclose(g);
    return dp_error("IDX file '%s': bad magic %02x %02x %02x %02x (expected 00 00 <type> <1..4 dims>)", path, magic[0],
                    magic[1], magic[2], magic[3]);
  }
  if (magic[2] != 0x08) {
    gzclose(g);
    return dp_error("IDX file '%s': element type 0x%02x is not supported (expected 0x08, unsigned bytes)", path,
                    magic[2]);
  }
  *ndim = magic[3];
  size_t per_entry = 1;
  for (int i = 0; i < *ndim; i++) {
    uint8_t b[4];
    if (read_exact(g, b, 4)) {
      gzclose(g);
      return dp_error("IDX file '%s': truncated header", path);
    }
    dims[i] = ((int64_t)b[0] << 24) | ((int64_t)b[1] << 16) | ((int64_t)b[2] << 8) | b[3];
  }
  if (limit >= 0 && limit < dims[0]) dims[0] = limit;
  /* the header's sizes are the file's word: a tensor's limits first (their
   * product cannot wrap), and no abort when they are more than memory */
  if (dp_check_shape(*ndim, dims)) {
    char why[256];
    snprintf(why, sizeof why, "%s", dp_errmsg()); /* dp_error reuses the message's buffer */
    gzclose(g);
    return dp_error("IDX file '%s': %s", path, why);
  }
  for (int i = 1; i < *ndim; i++) per_entry *= (size_t)dims[i];
  size_t n = (size_t)dims[0] * per_entry;
  *data = malloc(n ? n : 1);
  if (!*data) {
    gzclose(g);
    return dp_error("IDX file '%s': out of memory for the %zu bytes its header gives", path, n);
  }
  if (read_exact(g, *data, n)) {
    gzclose(g);
    free(*data);
    *data = NULL;
    return dp_error("IDX file '%s': truncated data (expected %zu bytes after the header)", path, n);
  }
  gzclose(g);
  return 0;
}
