/* See regular_file.h. */
#include "io/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

static const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

FILE *dp_fopen_regular(const char *path, int64_t *size) {
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
   * writer; it has no effect on the reads of a regular file */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    dp_error("cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    dp_error("cannot open: %s", strerror(errno));
    close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    dp_error("not a regular file (it is %s)", kind_of(st.st_mode));
    close(fd);
    return NULL;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    dp_error("cannot open: %s", strerror(errno));
    close(fd);
    return NULL;
  }
  if (size) *size = (int64_t)st.st_size;
  return f;
}
