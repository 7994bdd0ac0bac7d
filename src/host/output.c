/* Relaying a worker's output. Each worker writes into its own pipes; the
 * host is the only writer of its stdout/stderr and writes whole lines only
 * ("[rank N] " + line + "\n"), a batch of them per write, so ranks never
 * interleave mid-line however the workers' stdio splits its writes. Lines
 * also go unprefixed to DIR/rank_N.log, and the last ones are kept for the
 * failure summary. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"

enum {
  TAIL_LINES = 20,
  TAIL_LINE_MAX = 1000,    /* bytes of a line kept for the summary */
  LINE_MAX_BYTES = 4 << 20 /* a "line" longer than this is cut: memory stays bounded */
};

typedef struct {
  char *buf;
  size_t len, cap;
} bytes;

struct dp_relay {
  int rank, log_fd;
  char prefix[32];
  size_t prefix_len;
  bytes partial[2]; /* unfinished line of stdout, stderr */
  bytes out, log;   /* lines ready to be written */
  char *tail[TAIL_LINES];
  int tail_next, tail_count;
};

/* once the host's stdout/stderr is gone (EPIPE) output is dropped, but the
 * workers' pipes are still drained so they never block */
static bool host_fd_broken[3];

static void append(bytes *b, const char *p, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 256;
    b->buf = dp_xrealloc(b->buf, b->cap);
  }
  memcpy(b->buf + b->len, p, n);
  b->len += n;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k > 0) {
      p += k, n -= (size_t)k;
    } else if (k < 0 && errno == EAGAIN) { /* a non-blocking terminal or pipe: wait until it drains */
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, -1);
    } else if (!(k < 0 && errno == EINTR)) {
      if (fd <= 2) host_fd_broken[fd] = true;
      return;
    }
  }
}

dp_relay *dp_relay_new(int rank, int log_fd) {
  dp_relay *r = dp_xcalloc(1, sizeof *r);
  r->rank = rank;
  r->log_fd = log_fd;
  r->prefix_len = (size_t)snprintf(r->prefix, sizeof r->prefix, "[rank %d] ", rank);
  return r;
}

static void emit(dp_relay *r, const char *line, size_t n) {
  append(&r->out, r->prefix, r->prefix_len);
  append(&r->out, line, n);
  append(&r->out, "\n", 1);
  if (r->log_fd >= 0) {
    append(&r->log, line, n);
    append(&r->log, "\n", 1);
  }
  size_t keep = n < TAIL_LINE_MAX ? n : TAIL_LINE_MAX;
  char *t = dp_xrealloc(r->tail[r->tail_next], keep + 1);
  memcpy(t, line, keep);
  t[keep] = 0;
  r->tail[r->tail_next] = t;
  r->tail_next = (r->tail_next + 1) % TAIL_LINES;
  if (r->tail_count < TAIL_LINES) r->tail_count++;
}

static void flush(dp_relay *r, int stream) {
  if (r->out.len && !host_fd_broken[stream]) write_all(stream, r->out.buf, r->out.len);
  r->out.len = 0;
  if (r->log.len) write_all(r->log_fd, r->log.buf, r->log.len);
  r->log.len = 0;
}

void dp_relay_feed(dp_relay *r, int stream, const char *data, size_t n) {
  DP_ASSERT(stream == 1 || stream == 2);
  bytes *part = &r->partial[stream - 1];
  const char *p = data, *end = data + n;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) {
      append(part, p, (size_t)(end - p));
      if (part->len >= LINE_MAX_BYTES) {
        emit(r, part->buf, part->len);
        part->len = 0;
      }
      break;
    }
    if (part->len) {
      append(part, p, (size_t)(nl - p));
      emit(r, part->buf, part->len);
      part->len = 0;
    } else {
      emit(r, p, (size_t)(nl - p));
    }
    p = nl + 1;
  }
  flush(r, stream);
}

void dp_relay_close(dp_relay *r, int stream) {
  bytes *part = &r->partial[stream - 1];
  if (part->len) {
    emit(r, part->buf, part->len);
    part->len = 0;
    flush(r, stream);
  }
}

void dp_relay_print_tail(dp_relay *r, int fd) {
  if (r->tail_count == 0) return;
  bytes b = {0};
  char head[96];
  int k = snprintf(head, sizeof head, "ddplua: last %d line%s of rank %d:\n", r->tail_count,
                   r->tail_count == 1 ? "" : "s", r->rank);
  append(&b, head, (size_t)k);
  for (int i = 0; i < r->tail_count; i++) {
    const char *line = r->tail[(r->tail_next - r->tail_count + i + TAIL_LINES) % TAIL_LINES];
    append(&b, "    ", 4);
    append(&b, line, strlen(line));
    append(&b, "\n", 1);
  }
  write_all(fd, b.buf, b.len);
  free(b.buf);
}

void dp_relay_free(dp_relay *r) {
  if (!r) return;
  free(r->partial[0].buf);
  free(r->partial[1].buf);
  free(r->out.buf);
  free(r->log.buf);
  for (int i = 0; i < TAIL_LINES; i++) free(r->tail[i]);
  free(r);
}
