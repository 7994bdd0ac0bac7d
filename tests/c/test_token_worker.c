/* Token files and the DataLoader's worker transport at the C level: token
 * windows against values computed here (uint8 and uint16), random starts,
 * the errors of bad files, starts and ids; batch payloads round-tripping
 * (non-contiguous tensors, text), malformed payloads rejected without a
 * crash (ASan checks the reads), and a forked worker's messages, EOF and
 * exit status. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "data/token_file.h"
#include "data/worker_proc.h"
#include "ops/ops.h"
#include "test_util.h"

static void test_token_file(void) {
  char path[] = "/tmp/ddplua_test_tokXXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  int64_t ids[300];
  for (int i = 0; i < 300; i++) ids[i] = (i * 263) % 65536 + 1; /* 1-based, beyond 255 */
  CHECK(dp_token_file_write(path, ids, 300, 2) == 0);
  dp_token_file *f = dp_token_file_open(path, 2);
  CHECK(f && dp_token_file_len(f) == 300);
  int64_t starts[2] = {0, 295}, x[8], y[8];
  CHECK(dp_token_file_windows(f, starts, 2, 4, x, y) == 0);
  for (int t = 0; t < 4; t++) {
    CHECK(x[t] == ids[t] && y[t] == ids[t + 1]);
    CHECK(x[4 + t] == ids[295 + t] && y[4 + t] == ids[296 + t]);
  }
  int64_t bad[1] = {296}; /* its target would be token 301 */
  CHECK(dp_token_file_windows(f, bad, 1, 4, x, y) != 0);
  CHECK(strstr(dp_errmsg(), "window start 297") != NULL);
  CHECK(dp_token_file_windows(f, bad, 1, 4, x, NULL) == 0); /* without targets it fits */
  int64_t r1[64], r2[64];
  dp_token_file_random_starts(296, 7, 100, 64, r1);
  dp_token_file_random_starts(296, 7, 100, 64, r2);
  int same = 1, in_range = 1, distinct = 0;
  for (int i = 0; i < 64; i++) {
    same &= r1[i] == r2[i];
    in_range &= r1[i] >= 0 && r1[i] < 296;
    distinct += i > 0 && r1[i] != r1[i - 1];
  }
  CHECK(same && in_range && distinct > 50);
  dp_token_file_close(f);

  /* an id that does not fit leaves the old file alone */
  int64_t big[2] = {1, 257};
  CHECK(dp_token_file_write(path, big, 2, 1) != 0);
  CHECK(strstr(dp_errmsg(), "id 257 at position 2") != NULL);
  f = dp_token_file_open(path, 2);
  CHECK(f && dp_token_file_len(f) == 300);
  dp_token_file_close(f);
  f = dp_token_file_open(path, 1); /* uint8 view of the same bytes: 600 tokens */
  CHECK(f && dp_token_file_len(f) == 600);
  int64_t s0[1] = {0}, x1[2];
  CHECK(dp_token_file_windows(f, s0, 1, 2, x1, NULL) == 0);
  CHECK(x1[0] == ((ids[0] - 1) & 0xff) + 1 && x1[1] == ((ids[0] - 1) >> 8) + 1); /* little-endian */
  dp_token_file_close(f);

  FILE *o = fopen(path, "wb");
  fputs("abc", o);
  fclose(o);
  CHECK(dp_token_file_open(path, 2) == NULL && strstr(dp_errmsg(), "not a whole number of tokens"));
  CHECK(dp_token_file_open(path, 3) == NULL);
  unlink(path);
  CHECK(dp_token_file_open(path, 1) == NULL && strstr(dp_errmsg(), "cannot open"));
}

static void test_pack_roundtrip(void) {
  int64_t shape[2] = {3, 4};
  dp_tensor *a = dp_empty(DP_F32, 2, shape, dp_cpu());
  float *ap = dp_data(a);
  for (int i = 0; i < 12; i++) ap[i] = (float)i * 0.5f;
  dp_tensor *at = dp_transpose(a, 0, 1); /* non-contiguous [4, 3] */
  int64_t n5 = 5;
  dp_tensor *b = dp_empty(DP_I64, 1, &n5, dp_cpu());
  for (int i = 0; i < 5; i++) ((int64_t *)dp_data(b))[i] = -i;
  dp_tensor *e = dp_empty(DP_U8, 1, (int64_t[]){0}, dp_cpu()); /* empty */
  dp_tensor *ts[3] = {at, b, e};
  int fd = dp_worker_pack("hello", 5, ts, 3);
  CHECK(fd >= 0);
  const char *text;
  size_t len;
  dp_tensor **out;
  int nt;
  dp_storage *map;
  CHECK(dp_worker_unpack(fd, &text, &len, &out, &nt, &map) == 0);
  CHECK(len == 5 && memcmp(text, "hello", 5) == 0 && nt == 3);
  CHECK(out[0]->ndim == 2 && out[0]->shape[0] == 4 && out[0]->shape[1] == 3 && out[0]->dtype == DP_F32);
  const float *o0 = dp_data(out[0]);
  CHECK(o0[0] == 0.f && o0[1] == 2.f && o0[3] == 0.5f); /* the transposed values, contiguous */
  CHECK(((const int64_t *)dp_data(out[1]))[4] == -4 && out[2]->shape[0] == 0);
  dp_storage_release(map);
  for (int i = 0; i < nt; i++) dp_release(out[i]);
  free(out);
  dp_release(at);
  dp_release(a);
  dp_release(b);
  dp_release(e);
}

/* A memfd holding exactly these bytes. */
static int memfd_with(const void *p, size_t n) {
  int fd = memfd_create("t", 0);
  if (n && write(fd, p, n) != (ssize_t)n) return -1;
  return fd;
}

static void test_malformed(void) {
  const char *text;
  size_t len;
  dp_tensor **out;
  int nt;
  dp_storage *map;
  CHECK(dp_worker_unpack(memfd_with("xy", 2), &text, &len, &out, &nt, &map) != 0); /* truncated */
  char junk[256];
  memset(junk, 0x5a, sizeof junk);
  CHECK(dp_worker_unpack(memfd_with(junk, sizeof junk), &text, &len, &out, &nt, &map) != 0); /* no magic */
  /* a real payload, then each field corrupted in turn */
  int64_t n = 4;
  dp_tensor *t = dp_zeros(DP_F64, 1, &n, dp_cpu());
  int fd = dp_worker_pack("ab", 2, &t, 1);
  off_t size = lseek(fd, 0, SEEK_END);
  char *good = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  /* header: magic u64, text_len u64, nt u32, pad u32; then dtype i32, ndim i32, shape[8] i64, offset, nbytes */
  size_t at_text = 8, at_nt = 16, at_dtype = 24, at_ndim = 28, at_shape = 32, at_off = 32 + 64, at_bytes = 32 + 72;
  struct {
    size_t at;
    int64_t v;
    int width;
  } cases[] = {
      {at_text, 1 << 30, 8}, {at_nt, 1 << 21, 4},        {at_nt, 1000, 4},
      {at_dtype, 99, 4},     {at_dtype, -1, 4},          {at_ndim, 9, 4},
      {at_shape, -1, 8},     {at_shape, 1LL << 62, 8},   {at_off, 1 << 20, 8},
      {at_off, 65, 8},       {at_bytes, 1 << 20, 8},     {at_bytes, 8, 8},
      {at_shape, 5, 8},      {at_off, (int64_t)size, 8},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char *copy = malloc((size_t)size);
    memcpy(copy, good, (size_t)size);
    memcpy(copy + cases[c].at, &cases[c].v, (size_t)cases[c].width);
    int rc = dp_worker_unpack(memfd_with(copy, (size_t)size), &text, &len, &out, &nt, &map);
    if (rc == 0) {
      fprintf(stderr, "malformed case %zu was accepted\n", c);
      dp_storage_release(map);
      for (int i = 0; i < nt; i++) dp_release(out[i]);
      free(out);
    }
    CHECK(rc != 0);
    free(copy);
  }
  munmap(good, (size_t)size);
  close(fd);
  dp_release(t);
}

static void test_fork_messages(void) {
  pid_t pid;
  int sock;
  int r = dp_worker_fork(&pid, &sock);
  CHECK(r >= 0);
  if (r == 1) { /* the worker: echo one task back with its seq doubled, then leave */
    dp_wmsg m;
    if (dp_worker_recv(sock, 5000, &m) != 1) _exit(10);
    if (m.fd >= 0) close(m.fd);
    if (dp_worker_send(sock, DP_WMSG_RESULT, m.seq * 2, 42, -1)) _exit(11);
    _exit(7);
  }
  int payload = dp_worker_pack("x", 1, NULL, 0);
  CHECK(dp_worker_send(sock, DP_WMSG_TASK, 21, -1, payload) == 0);
  close(payload);
  CHECK(dp_worker_poll(&sock, 1, 5000) == 0);
  dp_wmsg m;
  CHECK(dp_worker_recv(sock, 5000, &m) == 1);
  CHECK(m.kind == DP_WMSG_RESULT && m.seq == 42 && m.item == 42 && m.fd == -1);
  CHECK(dp_worker_recv(sock, 5000, &m) == -1 && strcmp(dp_errmsg(), "closed") == 0); /* it left: EOF */
  char how[96];
  CHECK(dp_worker_reap(pid, 2000, how, sizeof how) == 0 && strcmp(how, "exited with code 7") == 0);
  CHECK(dp_worker_alive(pid, how, sizeof how) == -1); /* reaped: not a child any more */
  dp_worker_close(sock);

  /* a worker that never answers: the timeout, then SIGKILL at reaping */
  r = dp_worker_fork(&pid, &sock);
  if (r == 1) {
    pause();
    _exit(0);
  }
  CHECK(dp_worker_recv(sock, 50, &m) == 0);
  CHECK(dp_worker_alive(pid, how, sizeof how) == 1);
  CHECK(dp_worker_reap(pid, 50, how, sizeof how) == 0 && strstr(how, "signal 9 (SIGKILL)") != NULL);
  dp_worker_close(sock);
}

int main(void) {
  test_token_file();
  test_pack_roundtrip();
  test_malformed();
  test_fork_messages();
  TEST_DONE();
}
