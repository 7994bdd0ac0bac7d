#include "io/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- byte buffer ---- */

void dp_sbuf_add(dp_sbuf *b, const void *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    b->p = dp_xrealloc(b->p, cap);
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

void dp_sbuf_puts(dp_sbuf *b, const char *s) { dp_sbuf_add(b, s, strlen(s)); }
void dp_sbuf_putc(dp_sbuf *b, char c) { dp_sbuf_add(b, &c, 1); }

void dp_sbuf_printf(dp_sbuf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    dp_sbuf_add(b, small, (size_t)n);
    return;
  }
  char *big = dp_xmalloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  dp_sbuf_add(b, big, (size_t)n);
  free(big);
}

void dp_sbuf_free(dp_sbuf *b) {
  free(b->p);
  *b = (dp_sbuf){0};
}

/* ---- writer ---- */

void dp_json_put_string(dp_sbuf *b, const char *s, size_t n) {
  dp_sbuf_putc(b, '"');
  size_t run = 0; /* start of the pending run of bytes that need no escape */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    if (c == '"') esc = "\\\"";
    else if (c == '\\') esc = "\\\\";
    else if (c == '\n') esc = "\\n";
    else if (c == '\r') esc = "\\r";
    else if (c == '\t') esc = "\\t";
    else if (c < 0x20 || c == 0x7f) {
      snprintf(u, sizeof u, "\\u%04x", c);
      esc = u;
    }
    if (esc) {
      dp_sbuf_add(b, s + run, i - run);
      dp_sbuf_puts(b, esc);
      run = i + 1;
    }
  }
  dp_sbuf_add(b, s + run, n - run);
  dp_sbuf_putc(b, '"');
}

void dp_format_float(char *out, size_t n, double v, int yaml) {
  char buf[48]; /* "%.17g" of a double needs at most 24 bytes, ".0" two more */
  if (isnan(v)) strcpy(buf, yaml ? ".nan" : "NaN");
  else if (isinf(v)) strcpy(buf, v > 0 ? (yaml ? ".inf" : "Infinity") : (yaml ? "-.inf" : "-Infinity"));
  else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(buf, sizeof buf, "%.*g", prec, v);
      if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
  }
  size_t k = strlen(buf);
  if (k >= n) k = n - 1;
  memcpy(out, buf, k);
  out[k] = 0;
}

void dp_json_put_float(dp_sbuf *b, double v) {
  char buf[40];
  dp_format_float(buf, sizeof buf, v, 0);
  dp_sbuf_puts(b, buf);
}

/* ---- reader ---- */

typedef struct {
  const unsigned char *s;
  size_t len, pos, base;
  const char *name;
  int depth;
} parser;

static int fail_at(parser *p, size_t at, const char *what) {
  return dp_error("%s: invalid JSON at byte %zu: %s", p->name, p->base + at, what);
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int peek(parser *p) { return p->pos < p->len ? p->s[p->pos] : -1; }

static int literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return 0;
  p->pos += n;
  return 1;
}

static int hex4(parser *p, unsigned *out) {
  if (p->len - p->pos < 4) return fail_at(p, p->pos, "truncated \\u escape");
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned char c = p->s[p->pos + k];
    unsigned d = c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : 16;
    if (d == 16) return fail_at(p, p->pos + k, "bad hex digit in \\u escape");
    v = v * 16 + d;
  }
  p->pos += 4;
  *out = v;
  return 0;
}

static void put_utf8(dp_sbuf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) u[0] = (char)cp, n = 1;
  else if (cp < 0x800) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
  else if (cp < 0x10000)
    u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
  else
    u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f)), u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)),
    u[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
  dp_sbuf_add(b, u, n);
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629), 0 if malformed. */
size_t dp_utf8_len(const unsigned char *s, size_t avail) {
  unsigned char c = s[0];
  size_t n;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f; /* no surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else return 0;
  if (avail < n) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t k = 2; k < n; k++)
    if (s[k] < 0x80 || s[k] > 0xbf) return 0;
  return n;
}

/* At the opening quote. */
static int parse_string(parser *p, char **out, size_t *out_len) {
  size_t start = p->pos++;
  dp_sbuf b = {0};
  dp_sbuf_add(&b, "", 0);
  for (;;) {
    if (p->pos >= p->len) {
      dp_sbuf_free(&b);
      return fail_at(p, start, "unterminated string");
    }
    unsigned char c = p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c < 0x20) {
      dp_sbuf_free(&b);
      return fail_at(p, p->pos, "unescaped control character in string");
    }
    if (c >= 0x80) {
      size_t n = dp_utf8_len(p->s + p->pos, p->len - p->pos);
      if (!n) {
        dp_sbuf_free(&b);
        return fail_at(p, p->pos, "invalid UTF-8 in string");
      }
      dp_sbuf_add(&b, p->s + p->pos, n);
      p->pos += n;
      continue;
    }
    if (c != '\\') {
      dp_sbuf_putc(&b, (char)c);
      p->pos++;
      continue;
    }
    size_t esc_at = p->pos++;
    int e = peek(p);
    p->pos++;
    switch (e) {
    case '"': dp_sbuf_putc(&b, '"'); break;
    case '\\': dp_sbuf_putc(&b, '\\'); break;
    case '/': dp_sbuf_putc(&b, '/'); break;
    case 'b': dp_sbuf_putc(&b, '\b'); break;
    case 'f': dp_sbuf_putc(&b, '\f'); break;
    case 'n': dp_sbuf_putc(&b, '\n'); break;
    case 'r': dp_sbuf_putc(&b, '\r'); break;
    case 't': dp_sbuf_putc(&b, '\t'); break;
    case 'u': {
      unsigned cp, lo;
      if (hex4(p, &cp)) goto fail;
      if (cp >= 0xdc00 && cp <= 0xdfff) {
        fail_at(p, esc_at, "unpaired low surrogate in \\u escape");
        goto fail;
      }
      if (cp >= 0xd800 && cp <= 0xdbff) {
        if (!literal(p, "\\u")) {
          fail_at(p, esc_at, "high surrogate not followed by a low surrogate");
          goto fail;
        }
        if (hex4(p, &lo)) goto fail;
        if (lo < 0xdc00 || lo > 0xdfff) {
          fail_at(p, esc_at, "high surrogate not followed by a low surrogate");
          goto fail;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      put_utf8(&b, cp);
      break;
    }
    default: fail_at(p, esc_at, "invalid escape in string"); goto fail;
    }
  }
  *out = b.p;
  *out_len = b.len;
  return 0;
fail:
  dp_sbuf_free(&b);
  return -1;
}

static int parse_number(parser *p, dp_json *v) {
  size_t start = p->pos;
  int is_float = 0;
  if (peek(p) == '-') p->pos++;
  if (literal(p, "Infinity")) {
    v->type = DP_JSON_FLOAT;
    v->f = p->s[start] == '-' ? -INFINITY : INFINITY;
    return 0;
  }
  int c = peek(p);
  if (c == '0') p->pos++;
  else if (c >= '1' && c <= '9')
    while ((c = peek(p)) >= '0' && c <= '9') p->pos++;
  else return fail_at(p, start, "expected a value");
  if (peek(p) == '.') {
    is_float = 1;
    p->pos++;
    if (!((c = peek(p)) >= '0' && c <= '9')) return fail_at(p, p->pos, "expected a digit after '.'");
    while ((c = peek(p)) >= '0' && c <= '9') p->pos++;
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    is_float = 1;
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-') p->pos++;
    if (!((c = peek(p)) >= '0' && c <= '9')) return fail_at(p, p->pos, "expected a digit in the exponent");
    while ((c = peek(p)) >= '0' && c <= '9') p->pos++;
  }
  size_t n = p->pos - start;
  if (!is_float) {
    int neg = p->s[start] == '-';
    uint64_t acc = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t k = start + (size_t)neg; k < p->pos; k++) {
      unsigned d = p->s[k] - '0';
      if (acc > (limit - d) / 10) return fail_at(p, start, "integer out of the 64-bit range");
      acc = acc * 10 + d;
    }
    v->type = DP_JSON_INT;
    v->i = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 0;
  }
  char buf[512];
  if (n >= sizeof buf) return fail_at(p, start, "number too long");
  memcpy(buf, p->s + start, n);
  buf[n] = 0;
  v->type = DP_JSON_FLOAT;
  v->f = strtod(buf, NULL);
  return 0;
}

static int parse_value(parser *p, dp_json *v);

typedef struct {
  const char *k;
  size_t len, offset;
} key_ref;

static int key_ref_cmp(const void *a, const void *b) {
  const key_ref *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->k, y->k, n);
  if (c) return c;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset; /* later duplicate is reported */
}

static void append_child(dp_json *v, size_t *cap, const dp_json *child, char *key, size_t key_len) {
  if (v->n == *cap) {
    *cap = *cap ? *cap * 2 : 4;
    v->items = dp_xrealloc(v->items, *cap * sizeof *v->items);
    if (v->type == DP_JSON_OBJECT) {
      v->keys = dp_xrealloc(v->keys, *cap * sizeof *v->keys);
      v->key_lens = dp_xrealloc(v->key_lens, *cap * sizeof *v->key_lens);
    }
  }
  v->items[v->n] = *child;
  if (v->type == DP_JSON_OBJECT) {
    v->keys[v->n] = key;
    v->key_lens[v->n] = key_len;
  }
  v->n++;
}

static int check_duplicate_keys(parser *p, const dp_json *v) {
  if (v->n < 2) return 0;
  key_ref *refs = dp_xmalloc(v->n * sizeof *refs);
  for (size_t k = 0; k < v->n; k++) refs[k] = (key_ref){v->keys[k], v->key_lens[k], v->items[k].offset};
  qsort(refs, v->n, sizeof *refs, key_ref_cmp);
  int rc = 0;
  for (size_t k = 1; k < v->n && !rc; k++)
    if (refs[k].len == refs[k - 1].len && memcmp(refs[k].k, refs[k - 1].k, refs[k].len) == 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "duplicate key \"%.100s\"", refs[k].k);
      rc = fail_at(p, refs[k].offset, msg);
    }
  free(refs);
  return rc;
}

static int parse_container(parser *p, dp_json *v, int object) {
  if (++p->depth > DP_JSON_MAX_DEPTH) return fail_at(p, p->pos, "nested too deeply");
  char close = object ? '}' : ']';
  v->type = object ? DP_JSON_OBJECT : DP_JSON_ARRAY;
  size_t cap = 0;
  p->pos++;
  skip_ws(p);
  if (peek(p) == close) {
    p->pos++;
    p->depth--;
    return 0;
  }
  for (;;) {
    char *key = NULL;
    size_t key_len = 0;
    skip_ws(p);
    if (object) {
      if (peek(p) != '"') return fail_at(p, p->pos, "expected a string key");
      if (parse_string(p, &key, &key_len)) return -1;
      skip_ws(p);
      if (peek(p) != ':') {
        free(key);
        return fail_at(p, p->pos, "expected ':' after an object key");
      }
      p->pos++;
      skip_ws(p);
    }
    dp_json child = {0};
    if (parse_value(p, &child)) { /* the child freed its own partial contents */
      free(key);
      return -1;
    }
    append_child(v, &cap, &child, key, key_len);
    skip_ws(p);
    int c = peek(p);
    if (c == ',') {
      p->pos++;
      skip_ws(p);
      if (peek(p) == close) return fail_at(p, p->pos, "trailing comma");
      continue;
    }
    if (c == close) {
      p->pos++;
      break;
    }
    return fail_at(p, p->pos, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  p->depth--;
  return object ? check_duplicate_keys(p, v) : 0;
}

static void free_contents(dp_json *v);

/* On failure v holds whatever was built so far; the caller frees it. */
static int parse_value(parser *p, dp_json *v) {
  skip_ws(p);
  v->offset = p->base + p->pos;
  int c = peek(p);
  int rc;
  switch (c) {
  case -1: return fail_at(p, p->pos, "unexpected end of input");
  case '{': rc = parse_container(p, v, 1); break;
  case '[': rc = parse_container(p, v, 0); break;
  case '"':
    v->type = DP_JSON_STRING;
    rc = parse_string(p, &v->str, &v->len);
    break;
  case 't':
  case 'f':
  case 'n':
  case 'N':
    if (literal(p, "true")) v->type = DP_JSON_BOOL, v->b = 1;
    else if (literal(p, "false")) v->type = DP_JSON_BOOL, v->b = 0;
    else if (literal(p, "null")) v->type = DP_JSON_NULL;
    else if (literal(p, "NaN")) v->type = DP_JSON_FLOAT, v->f = NAN;
    else return fail_at(p, p->pos, "expected a value");
    return 0;
  default: rc = parse_number(p, v);
  }
  if (rc) free_contents(v);
  return rc;
}

static void free_contents(dp_json *v) {
  for (size_t k = 0; k < v->n; k++) {
    free_contents(&v->items[k]);
    if (v->keys) free(v->keys[k]);
  }
  free(v->items);
  free(v->keys);
  free(v->key_lens);
  free(v->str);
  *v = (dp_json){0};
}

dp_json *dp_json_parse(const char *text, size_t len, const char *name, size_t base_offset) {
  parser p = {(const unsigned char *)text, len, 0, base_offset, name, 0};
  dp_json *v = dp_xcalloc(1, sizeof *v);
  if (parse_value(&p, v)) {
    free(v);
    return NULL;
  }
  skip_ws(&p);
  if (p.pos != p.len) {
    fail_at(&p, p.pos, "unexpected data after the value");
    dp_json_free(v);
    return NULL;
  }
  return v;
}

void dp_json_free(dp_json *v) {
  if (!v) return;
  free_contents(v);
  free(v);
}

const dp_json *dp_json_get(const dp_json *obj, const char *key) {
  if (!obj || obj->type != DP_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (size_t k = 0; k < obj->n; k++)
    if (obj->key_lens[k] == n && memcmp(obj->keys[k], key, n) == 0) return &obj->items[k];
  return NULL;
}

const char *dp_json_type_name(dp_json_type t) {
  static const char *const names[] = {"null",     "a boolean", "an integer", "a float",
                                      "a string", "an array",  "an object"};
  return (unsigned)t <= DP_JSON_OBJECT ? names[t] : "?";
}
