#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "ops/ops.h"

/* Element data is written from memory as is: the format is little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

static const char *const st_names[DP_NDTYPES] = {
    [DP_F32] = "F32", [DP_F64] = "F64", [DP_I64] = "I64", [DP_U8] = "U8", [DP_BF16] = "BF16", [DP_F16] = "F16",
};

const char *dp_st_dtype_name(dp_dtype t) { return (unsigned)t < DP_NDTYPES ? st_names[t] : NULL; }

int dp_st_dtype_parse(const char *s, dp_dtype *out) {
  for (int t = 0; t < DP_NDTYPES; t++)
    if (strcmp(s, st_names[t]) == 0) {
      *out = (dp_dtype)t;
      return 0;
    }
  return -1;
}

/* "<path>: invalid safetensors file at byte <at>: <message>" */
static int bad(const char *path, size_t at, const char *fmt, ...) DP_PRINTF(3, 4);
static int bad(const char *path, size_t at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dp_error("%s: invalid safetensors file at byte %zu: %s", path, at, msg);
}

/* ---- writing ---- */

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

typedef struct {
  size_t index;
  size_t elsize;
} data_slot;

/* Bigger elements first, then the order given: keeps every tensor aligned. */
static int slot_cmp(const void *a, const void *b) {
  const data_slot *x = a, *y = b;
  if (x->elsize != y->elsize) return x->elsize > y->elsize ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t k = (unsigned char)s[i] < 0x80 ? 1 : dp_utf8_len((const unsigned char *)s + i, n - i);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

/* Names unique and non-empty, and every string valid UTF-8: the header is
 * JSON, which readers (this one included) reject otherwise. */
static int check_names(const char *path, const dp_st_tensor *ts, size_t n, const dp_st_meta *meta, size_t nmeta) {
  for (size_t i = 0; i < nmeta; i++)
    if (!is_utf8(meta[i].key, strlen(meta[i].key)) || !is_utf8(meta[i].value, meta[i].value_len))
      return dp_error("%s: metadata '%s' is not valid UTF-8 text", path, meta[i].key);
  for (size_t i = 0; i < n; i++) {
    if (!ts[i].name || !ts[i].name[0]) return dp_error("%s: tensor %zu has an empty name", path, i + 1);
    if (strcmp(ts[i].name, "__metadata__") == 0)
      return dp_error("%s: \"__metadata__\" is reserved by the format and cannot name a tensor", path);
    if (!ts[i].t) return dp_error("%s: tensor '%s' is missing", path, ts[i].name);
    if (!is_utf8(ts[i].name, strlen(ts[i].name)))
      return dp_error("%s: tensor name '%s' is not valid UTF-8", path, ts[i].name);
  }
  if (n < 2) return 0;
  char **names = dp_xmalloc(n * sizeof *names);
  for (size_t i = 0; i < n; i++) names[i] = ts[i].name;
  qsort(names, n, sizeof *names, name_cmp);
  int rc = 0;
  for (size_t i = 1; i < n && !rc; i++)
    if (strcmp(names[i], names[i - 1]) == 0) rc = dp_error("%s: tensor name '%s' is given twice", path, names[i]);
  free(names);
  return rc;
}

static size_t tensor_nbytes(const dp_tensor *t) { return (size_t)dp_numel(t) * dp_elsize(t); }

static void build_header(dp_sbuf *h, const dp_st_tensor *ts, size_t n, const uint64_t *begin, const dp_st_meta *meta,
                         size_t nmeta) {
  dp_sbuf_putc(h, '{');
  if (nmeta) {
    dp_sbuf_puts(h, "\"__metadata__\":{");
    for (size_t i = 0; i < nmeta; i++) {
      if (i) dp_sbuf_putc(h, ',');
      dp_json_put_string(h, meta[i].key, strlen(meta[i].key));
      dp_sbuf_putc(h, ':');
      dp_json_put_string(h, meta[i].value, meta[i].value_len);
    }
    dp_sbuf_putc(h, '}');
  }
  for (size_t i = 0; i < n; i++) {
    const dp_tensor *t = ts[i].t;
    if (i || nmeta) dp_sbuf_putc(h, ',');
    dp_json_put_string(h, ts[i].name, strlen(ts[i].name));
    dp_sbuf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", dp_st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) dp_sbuf_printf(h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    dp_sbuf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin[i],
                   (unsigned long long)(begin[i] + tensor_nbytes(t)));
  }
  dp_sbuf_putc(h, '}');
  while (h->len % 8) dp_sbuf_putc(h, ' ');
}

/* Writes t's elements: directly when it is a contiguous CPU tensor, else via
 * a contiguous CPU copy made for this tensor alone. */
static int write_tensor(int fd, dp_tensor *t) {
  if (dp_dev(t).type == DP_CPU && dp_is_contiguous(t)) return write_all(fd, dp_data(t), tensor_nbytes(t));
  dp_tensor *plain = dp_detach(t); /* no autograd node for a copy made only to be written */
  dp_tensor *cpu = plain ? dp_to(plain, t->dtype, dp_cpu()) : NULL;
  dp_tensor *dense = cpu ? dp_contiguous(cpu) : NULL;
  dp_clear(&plain);
  dp_clear(&cpu);
  if (!dense) return -2;
  int rc = write_all(fd, dp_data(dense), tensor_nbytes(dense));
  dp_release(dense);
  return rc;
}

static int fsync_parent_dir(const char *path) {
  char *dir = dp_xstrdup(path);
  char *slash = strrchr(dir, '/');
  const char *d = ".";
  if (slash) {
    if (slash == dir) slash[1] = 0;
    else *slash = 0;
    d = dir;
  }
  int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = 0;
  /* Some file systems cannot sync a directory (EINVAL); the rename is then
   * as durable as that file system makes it. */
  if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
    rc = dp_error("%s: cannot sync directory %s: %s", path, d, strerror(errno));
  if (fd >= 0) close(fd);
  free(dir);
  return rc;
}

int dp_safetensors_save(const char *path, const dp_st_tensor *ts, size_t n, const dp_st_meta *meta, size_t nmeta) {
  if (check_names(path, ts, n, meta, nmeta)) return -1;
  data_slot *order = dp_xmalloc((n ? n : 1) * sizeof *order);
  uint64_t *begin = dp_xmalloc((n ? n : 1) * sizeof *begin);
  for (size_t i = 0; i < n; i++) order[i] = (data_slot){i, dp_elsize(ts[i].t)};
  qsort(order, n, sizeof *order, slot_cmp);
  uint64_t off = 0;
  for (size_t k = 0; k < n; k++) {
    begin[order[k].index] = off;
    off += tensor_nbytes(ts[order[k].index].t);
  }
  dp_sbuf h = {0};
  build_header(&h, ts, n, begin, meta, nmeta);
  free(begin);

  size_t tmp_len = strlen(path) + 32;
  char *tmp = dp_xmalloc(tmp_len);
  snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
  int rc = -1, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    dp_error("%s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  unsigned char size_le[8];
  for (int b = 0; b < 8; b++) size_le[b] = (unsigned char)((uint64_t)h.len >> (8 * b));
  if (write_all(fd, size_le, 8) || write_all(fd, h.p, h.len)) goto io_error;
  for (size_t k = 0; k < n; k++) {
    int w = write_tensor(fd, ts[order[k].index].t);
    if (w == -2) {
      char prefix[256];
      snprintf(prefix, sizeof prefix, "%s: tensor '%.100s': ", path, ts[order[k].index].name);
      dp_error_prefix(prefix);
      goto cleanup;
    }
    if (w) goto io_error;
  }
  if (fsync(fd) != 0) goto io_error;
  if (close(fd) != 0) {
    fd = -1;
    goto io_error;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    dp_error("%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    goto cleanup;
  }
  rc = fsync_parent_dir(path);
  goto done;
io_error:
  dp_error("%s: cannot write %s: %s", path, tmp, strerror(errno));
cleanup:
  if (fd >= 0) close(fd);
  unlink(tmp);
done:
  free(tmp);
  free(order);
  dp_sbuf_free(&h);
  return rc;
}

/* ---- reading ---- */

typedef struct {
  size_t header_index; /* position among the header's tensors */
  const char *name;
  size_t at; /* file offset of the tensor's entry, for messages */
  dp_dtype dtype;
  int ndim;
  int64_t shape[DP_MAXDIM];
  uint64_t begin, end;
} entry;

static int read_all(int fd, void *p, size_t n, uint64_t off) {
  char *c = p;
  while (n) {
    ssize_t k = pread(fd, c, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
    off += (uint64_t)k;
  }
  return 0;
}

static int parse_entry(const char *path, const char *name, const dp_json *v, uint64_t buffer_size, entry *e) {
  e->name = name;
  e->at = v->offset;
  if (v->type != DP_JSON_OBJECT)
    return bad(path, v->offset, "tensor '%s' is described by %s, expected an object with dtype, shape and data_offsets",
               name, dp_json_type_name(v->type));
  for (size_t k = 0; k < v->n; k++) {
    const char *key = v->keys[k];
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return bad(path, v->items[k].offset,
                 "tensor '%s' has an unknown field \"%s\" (expected dtype, shape, data_offsets)", name, key);
  }
  const dp_json *dt = dp_json_get(v, "dtype"), *shape = dp_json_get(v, "shape"), *offs = dp_json_get(v, "data_offsets");
  if (!dt || !shape || !offs)
    return bad(path, v->offset, "tensor '%s' lacks \"%s\"", name, !dt ? "dtype" : !shape ? "shape" : "data_offsets");
  if (dt->type != DP_JSON_STRING)
    return bad(path, dt->offset, "tensor '%s': dtype is %s, expected a string", name, dp_json_type_name(dt->type));
  if (dp_st_dtype_parse(dt->str, &e->dtype))
    return bad(path, dt->offset, "tensor '%s' has dtype \"%s\"; ddplua reads F32, F64, I64, U8, BF16 and F16", name,
               dt->str);
  if (shape->type != DP_JSON_ARRAY)
    return bad(path, shape->offset, "tensor '%s': shape is %s, expected an array of integers", name,
               dp_json_type_name(shape->type));
  if (shape->n > DP_MAXDIM)
    return bad(path, shape->offset, "tensor '%s' has %zu dimensions; at most %d are supported", name, shape->n,
               DP_MAXDIM);
  e->ndim = (int)shape->n;
  uint64_t numel = 1;
  for (size_t d = 0; d < shape->n; d++) {
    const dp_json *s = &shape->items[d];
    if (s->type != DP_JSON_INT || s->i < 0)
      return bad(path, s->offset, "tensor '%s': shape entry %zu is not a non-negative integer", name, d + 1);
    e->shape[d] = s->i;
    if (s->i && numel > UINT64_MAX / (uint64_t)s->i) return bad(path, s->offset, "tensor '%s': shape overflows", name);
    numel *= (uint64_t)s->i;
  }
  if (offs->type != DP_JSON_ARRAY || offs->n != 2 || offs->items[0].type != DP_JSON_INT ||
      offs->items[1].type != DP_JSON_INT || offs->items[0].i < 0 || offs->items[1].i < 0)
    return bad(path, offs->offset, "tensor '%s': data_offsets must be two non-negative integers [begin, end]", name);
  e->begin = (uint64_t)offs->items[0].i;
  e->end = (uint64_t)offs->items[1].i;
  if (e->end < e->begin)
    return bad(path, offs->offset, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
               (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > buffer_size)
    return bad(path, offs->offset, "tensor '%s': data_offsets [%llu, %llu] run past the %llu-byte data buffer", name,
               (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)buffer_size);
  uint64_t es = dp_dtype_size(e->dtype);
  if (numel > UINT64_MAX / es || numel * es != e->end - e->begin)
    return bad(path, offs->offset,
               "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s x %llu elements need %llu", name,
               (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)(e->end - e->begin),
               dt->str, (unsigned long long)numel, (unsigned long long)(numel * es));
  return 0;
}

static int entry_cmp(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* The buffer must be covered exactly once, as the reference implementation
 * requires: no overlaps, no holes, nothing after the last tensor. */
static int check_coverage(const char *path, entry *es, size_t n, uint64_t buffer_size, size_t data_start) {
  entry **sorted = dp_xmalloc((n ? n : 1) * sizeof *sorted);
  for (size_t i = 0; i < n; i++) sorted[i] = &es[i];
  qsort(sorted, n, sizeof *sorted, entry_cmp);
  uint64_t expect = 0;
  const entry *prev = NULL;
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    const entry *e = sorted[i];
    if (e->begin < expect)
      rc = bad(path, e->at, "tensor '%s' [%llu, %llu] overlaps tensor '%s' [%llu, %llu]", e->name,
               (unsigned long long)e->begin, (unsigned long long)e->end, prev->name, (unsigned long long)prev->begin,
               (unsigned long long)prev->end);
    else if (e->begin > expect)
      rc = bad(path, e->at, "bytes [%llu, %llu) of the data buffer (file bytes %llu..) belong to no tensor before '%s'",
               (unsigned long long)expect, (unsigned long long)e->begin, (unsigned long long)(data_start + expect),
               e->name);
    expect = e->end;
    if (e->end > e->begin || !prev) prev = e;
  }
  if (!rc && expect != buffer_size)
    rc = bad(path, data_start + expect, "%llu bytes after the last tensor's data belong to no tensor",
             (unsigned long long)(buffer_size - expect));
  free(sorted);
  return rc;
}

static int parse_metadata(const char *path, const dp_json *m, dp_st_contents *out) {
  if (m->type != DP_JSON_OBJECT)
    return bad(path, m->offset, "__metadata__ is %s, expected an object of strings", dp_json_type_name(m->type));
  out->meta = dp_xcalloc(m->n ? m->n : 1, sizeof *out->meta);
  for (size_t k = 0; k < m->n; k++) {
    if (m->items[k].type != DP_JSON_STRING)
      return bad(path, m->items[k].offset, "__metadata__ value of \"%s\" is %s, expected a string", m->keys[k],
                 dp_json_type_name(m->items[k].type));
    if (strlen(m->keys[k]) != m->key_lens[k])
      return bad(path, m->items[k].offset, "__metadata__ key contains a NUL byte");
    dp_st_meta *e = &out->meta[out->nmeta++];
    e->key = dp_xstrdup(m->keys[k]);
    e->value = dp_xmalloc(m->items[k].len + 1);
    memcpy(e->value, m->items[k].str, m->items[k].len + 1);
    e->value_len = m->items[k].len;
  }
  return 0;
}

/* A file mapping shared by the storages of the tensors that alias it. */
typedef struct {
  atomic_int refs;
  void *base;
  size_t len;
} file_map;

static void map_unref(file_map *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
    munmap(m->base, m->len);
    free(m);
  }
}

static void mapped_storage_release(dp_storage *s) { map_unref(s->ctx); }

static file_map *map_file(int fd, size_t size) {
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) return NULL; /* the caller reads the file instead */
  file_map *m = dp_xmalloc(sizeof *m);
  atomic_init(&m->refs, 1);
  m->base = base;
  m->len = size;
  return m;
}

/* A tensor aliasing the mapping, or NULL when its bytes are not aligned to
 * its element size (or it is empty). */
static dp_tensor *mapped_tensor(file_map *m, const entry *e, size_t data_start) {
  size_t at = data_start + e->begin, nbytes = e->end - e->begin;
  if (!m || !nbytes || at % dp_dtype_size(e->dtype)) return NULL;
  atomic_fetch_add(&m->refs, 1);
  dp_storage *s = dp_storage_wrap((char *)m->base + at, nbytes, dp_cpu(), mapped_storage_release, m);
  dp_tensor *t = dp_from_storage(s, e->dtype, e->ndim, e->shape, NULL, 0);
  dp_storage_release(s); /* the tensor holds it now (or, on failure, the mapping reference goes) */
  return t;
}

static int load_tensors(const char *path, int fd, entry *es, size_t n, size_t data_start, dp_device dev, file_map *map,
                        dp_st_contents *out) {
  out->tensors = dp_xcalloc(n ? n : 1, sizeof *out->tensors);
  for (size_t i = 0; i < n; i++) {
    entry *e = &es[i];
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s: tensor '%.100s': ", path, e->name);
    dp_tensor *t = mapped_tensor(map, e, data_start);
    int mapped = t != NULL;
    if (!t) t = dp_empty(e->dtype, e->ndim, e->shape, dp_cpu());
    if (!t) {
      dp_error_prefix(prefix);
      return -1;
    }
    out->tensors[out->n].name = dp_xstrdup(e->name);
    out->tensors[out->n++].t = t;
    if (!mapped && read_all(fd, dp_data(t), e->end - e->begin, data_start + e->begin))
      return dp_error("%s: cannot read tensor '%s' (file bytes %llu..%llu): %s", path, e->name,
                      (unsigned long long)(data_start + e->begin), (unsigned long long)(data_start + e->end),
                      errno ? strerror(errno) : "the file is shorter than when it was opened");
    if (dev.type != DP_CPU) {
      dp_tensor *moved = dp_to(t, e->dtype, dev);
      if (!moved) {
        dp_error_prefix(prefix);
        return -1;
      }
      dp_release(t);
      out->tensors[out->n - 1].t = moved;
    }
  }
  return 0;
}

int dp_safetensors_load(const char *path, dp_device dev, int use_mmap, dp_st_contents *out) {
  *out = (dp_st_contents){0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dp_error("%s: cannot open: %s", path, strerror(errno));
  dp_json *root = NULL;
  char *header = NULL;
  entry *es = NULL;
  int rc = -1;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    dp_error("%s: cannot stat: %s", path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    dp_error("%s: not a regular file", path);
    goto done;
  }
  uint64_t size = (uint64_t)st.st_size;
  unsigned char size_le[8];
  if (size < 8 || read_all(fd, size_le, 8, 0)) {
    bad(path, 0, "the file is %llu bytes long, too short for the 8-byte header size", (unsigned long long)size);
    goto done;
  }
  uint64_t hn = 0;
  for (int b = 0; b < 8; b++) hn |= (uint64_t)size_le[b] << (8 * b);
  if (hn > size - 8) {
    bad(path, 0, "header size %llu exceeds the %llu bytes that follow it (truncated or not a safetensors file)",
        (unsigned long long)hn, (unsigned long long)(size - 8));
    goto done;
  }
  if (hn > DP_ST_MAX_HEADER) {
    bad(path, 0, "header size %llu exceeds the limit of %zu bytes", (unsigned long long)hn, DP_ST_MAX_HEADER);
    goto done;
  }
  header = dp_xmalloc(hn ? hn : 1);
  if (read_all(fd, header, hn, 8)) {
    dp_error("%s: cannot read the header: %s", path, strerror(errno));
    goto done;
  }
  root = dp_json_parse(header, hn, path, 8);
  if (!root) goto done;
  if (root->type != DP_JSON_OBJECT) {
    bad(path, root->offset, "the header is %s, expected an object", dp_json_type_name(root->type));
    goto done;
  }
  size_t data_start = 8 + hn;
  uint64_t buffer_size = size - data_start;
  es = dp_xcalloc(root->n ? root->n : 1, sizeof *es);
  size_t n = 0;
  for (size_t k = 0; k < root->n; k++) {
    if (strlen(root->keys[k]) != root->key_lens[k]) {
      bad(path, root->items[k].offset, "a tensor name contains a NUL byte");
      goto done;
    }
    if (strcmp(root->keys[k], "__metadata__") == 0) {
      if (parse_metadata(path, &root->items[k], out)) goto done;
      continue;
    }
    es[n].header_index = n;
    if (parse_entry(path, root->keys[k], &root->items[k], buffer_size, &es[n])) goto done;
    n++;
  }
  if (check_coverage(path, es, n, buffer_size, data_start)) goto done;
  file_map *map = use_mmap && buffer_size ? map_file(fd, size) : NULL;
  rc = load_tensors(path, fd, es, n, data_start, dev, map, out);
  map_unref(map); /* the tensors that alias it keep it */
done:
  close(fd);
  free(es);
  dp_json_free(root);
  free(header);
  if (rc) {
    char *msg = dp_xstrdup(dp_errmsg());
    dp_st_contents_free(out);
    dp_error("%s", msg);
    free(msg);
  }
  return rc;
}

void dp_st_contents_free(dp_st_contents *c) {
  for (size_t i = 0; i < c->n; i++) {
    free(c->tensors[i].name);
    dp_clear(&c->tensors[i].t);
  }
  for (size_t i = 0; i < c->nmeta; i++) {
    free(c->meta[i].key);
    free(c->meta[i].value);
  }
  free(c->tensors);
  free(c->meta);
  *c = (dp_st_contents){0};
}
