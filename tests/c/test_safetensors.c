/* The JSON reader and the safetensors reader on damaged input: every
 * truncation of a valid file and thousands of random byte changes to its
 * header must give an error (naming the file) or a well-formed result, never
 * a crash or an out-of-bounds access (this test also runs under ASan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "test_util.h"

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long k = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)k);
  *n = fread(buf, 1, (size_t)k, f);
  fclose(f);
  return buf;
}

/* Rewrites the file in place, without truncating it to zero first: ext4
 * flushes a file truncated to zero and rewritten at close, which would make
 * thousands of rewrites take seconds. */
static void write_file(const char *path, const char *buf, size_t n) {
  FILE *f = fopen(path, "r+b");
  if (!f) f = fopen(path, "wb");
  fwrite(buf, 1, n, f);
  fflush(f);
  CHECK(ftruncate(fileno(f), (off_t)n) == 0);
  fclose(f);
}

static void test_json(void) {
  const char *ok_docs[] = {"{}",
                           "[]",
                           "0",
                           "-0",
                           "1e5",
                           "-1.5E-3",
                           "\"\\u00e9\"",
                           "[1,[2,[3]]]",
                           "{\"a\":{\"b\":null}}",
                           "true",
                           " \t\n[ 1 , 2 ]\r\n",
                           "NaN",
                           "-Infinity",
                           "9223372036854775807",
                           "-9223372036854775808"};
  for (size_t i = 0; i < sizeof ok_docs / sizeof *ok_docs; i++) {
    dp_json *v = dp_json_parse(ok_docs[i], strlen(ok_docs[i]), "doc", 0);
    if (!v) fprintf(stderr, "rejected %s: %s\n", ok_docs[i], dp_errmsg());
    CHECK(v != NULL);
    dp_json_free(v);
  }
  const char *doc = "{\"k\": [10, -2, 3.5], \"s\": \"a\\nb\"}";
  dp_json *v = dp_json_parse(doc, strlen(doc), "doc", 0);
  CHECK(v && v->type == DP_JSON_OBJECT && v->n == 2);
  const dp_json *k = dp_json_get(v, "k");
  CHECK(k && k->type == DP_JSON_ARRAY && k->n == 3 && k->items[0].i == 10 && k->items[1].i == -2);
  CHECK(k && k->items[2].type == DP_JSON_FLOAT && k->items[2].f == 3.5);
  CHECK(k && k->offset == 6 && k->items[1].offset == 11);
  const dp_json *s = dp_json_get(v, "s");
  CHECK(s && s->len == 3 && memcmp(s->str, "a\nb", 3) == 0);
  dp_json_free(v);

  const char *bad_docs[] = {"",   "{",     "[1,]",    "{\"a\"}", "{\"a\":}", "{a:1}",      "01",           "1.", ".5",
                            "+1", "\"abc", "\"\\q\"", "[1 2]",   "nul",      "{\"a\":1}}", "\"\\ud800x\"", "1e", "--1"};
  for (size_t i = 0; i < sizeof bad_docs / sizeof *bad_docs; i++) {
    dp_json *b = dp_json_parse(bad_docs[i], strlen(bad_docs[i]), "doc.json", 100);
    if (b) fprintf(stderr, "accepted %s\n", bad_docs[i]);
    CHECK(b == NULL);
    CHECK(strncmp(dp_errmsg(), "doc.json: invalid JSON at byte 1", 32) == 0);
    dp_json_free(b);
  }
  /* input that is not NUL-terminated is never read past its end */
  char *exact = malloc(4);
  memcpy(exact, "[1,2", 4);
  CHECK(dp_json_parse(exact, 4, "x", 0) == NULL);
  memcpy(exact, "1234", 4);
  v = dp_json_parse(exact, 4, "x", 0);
  CHECK(v && v->i == 1234);
  dp_json_free(v);
  free(exact);
}

static uint32_t lcg(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

static void test_damaged_files(const char *dir) {
  char path[512], bad[512];
  snprintf(path, sizeof path, "%s/good.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  int64_t s1[2] = {3, 4}, s2[1] = {5}, s3[1] = {7};
  dp_st_tensor ts[3] = {{"w", dp_zeros(DP_F32, 2, s1, dp_cpu())},
                        {"b", dp_zeros(DP_BF16, 1, s2, dp_cpu())},
                        {"i", dp_zeros(DP_I64, 1, s3, dp_cpu())}};
  dp_st_meta meta[1] = {{"epoch", "3", 1}};
  CHECK(dp_safetensors_save(path, ts, 3, meta, 1) == 0);
  size_t n = 0;
  char *good = read_file(path, &n);
  CHECK(good != NULL);
  if (!good) return;
  dp_st_contents c;
  CHECK(dp_safetensors_load(path, dp_cpu(), 1, &c) == 0);
  CHECK(c.n == 3 && c.nmeta == 1 && strcmp(c.tensors[0].name, "w") == 0 && c.tensors[2].t->dtype == DP_I64);
  /* a mapped tensor outlives the contents (the mapping stays while it does) and
   * writing to it changes neither the file nor a second load */
  dp_tensor *kept = c.tensors[0].t;
  dp_retain(kept);
  dp_st_contents_free(&c);
  CHECK(kept->storage->release != NULL); /* aliases the mapping */
  float *kd = dp_data(kept);
  for (int i = 0; i < 12; i++) CHECK(kd[i] == 0.0f);
  for (int i = 0; i < 12; i++) kd[i] = (float)i;
  CHECK(dp_safetensors_load(path, dp_cpu(), 0, &c) == 0);
  CHECK(c.tensors[0].t->storage->release == NULL); /* read into fresh memory */
  CHECK(((float *)dp_data(c.tensors[0].t))[5] == 0.0f);
  dp_st_contents_free(&c);
  CHECK(kd[5] == 5.0f);
  dp_release(kept);

  /* every truncation is rejected and named */
  write_file(bad, good, n);
  for (size_t len = n; len-- > 0;) {
    write_file(bad, good, len);
    CHECK(dp_safetensors_load(bad, dp_cpu(), (int)(len % 2), &c) == -1);
    CHECK(strstr(dp_errmsg(), bad) != NULL);
  }
  /* random changes to the size field and header: an error or a consistent result */
  uint64_t hn;
  memcpy(&hn, good, 8);
  char *mut = malloc(n);
  uint32_t seed = 12345;
  int accepted = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(mut, good, n);
    int changes = 1 + (int)(lcg(&seed) % 3);
    for (int k = 0; k < changes; k++) {
      size_t at = lcg(&seed) % (8 + hn);
      mut[at] = (char)(iter % 4 == 0 ? "{}[]\",:0123456789 e-\\"[lcg(&seed) % 21] : (char)lcg(&seed));
    }
    write_file(bad, mut, n);
    if (dp_safetensors_load(bad, dp_cpu(), iter % 2, &c) == 0) {
      accepted++;
      size_t total = 0;
      for (size_t t = 0; t < c.n; t++) total += (size_t)dp_numel(c.tensors[t].t) * dp_elsize(c.tensors[t].t);
      uint64_t hn2;
      memcpy(&hn2, mut, 8);
      CHECK(total == n - 8 - hn2);
      dp_st_contents_free(&c);
    } else {
      CHECK(strstr(dp_errmsg(), bad) != NULL);
    }
  }
  printf("damaged headers: %d of 3000 still valid files\n", accepted);
  free(mut);
  free(good);
  for (int t = 0; t < 3; t++) dp_release(ts[t].t);
  unlink(path);
  unlink(bad);
}

int main(void) {
  test_json();
  char dir[] = "/tmp/test_safetensors_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  test_damaged_files(dir);
  rmdir(dir);
  TEST_DONE();
}
