/* A small JSON reader and writer for what ddplua stores as JSON: safetensors
 * headers (strings, integers, arrays, objects), the non-tensor state of
 * checkpoints (plus floats, booleans, null) and metrics.jsonl records.
 *
 * The reader builds a tree and remembers each value's byte offset, so that a
 * caller validating a file can say where a problem is. It rejects anything
 * that is not JSON (trailing commas, comments, unescaped control characters,
 * bad escapes or surrogates, integers out of int64 range, duplicate keys,
 * nesting deeper than DP_JSON_MAX_DEPTH) with "<name>: ... at byte <offset>".
 * Python's json module writes NaN/Infinity/-Infinity for non-finite floats;
 * the reader accepts them and the writer emits them, so such state
 * round-trips through ddplua and Python alike. */
#ifndef DP_JSON_H
#define DP_JSON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define DP_JSON_MAX_DEPTH 128

typedef enum {
  DP_JSON_NULL,
  DP_JSON_BOOL,
  DP_JSON_INT,
  DP_JSON_FLOAT,
  DP_JSON_STRING,
  DP_JSON_ARRAY,
  DP_JSON_OBJECT
} dp_json_type;

typedef struct dp_json dp_json;
struct dp_json {
  dp_json_type type;
  size_t offset; /* where the value starts, counted like the caller's base offset */
  int b;
  int64_t i;
  double f;
  char *str; /* strings: NUL-terminated copy; len excludes the NUL (may hold embedded NULs) */
  size_t len;
  /* arrays and objects: n children in order; objects also have keys */
  size_t n;
  dp_json *items;
  char **keys;
  size_t *key_lens;
};

/* Parses text[0..len). Offsets in the tree and in error messages are
 * base_offset + position (a safetensors header starts at byte 8). Returns a
 * tree to free with dp_json_free, or NULL after dp_error. */
dp_json *dp_json_parse(const char *text, size_t len, const char *name, size_t base_offset);
void dp_json_free(dp_json *v);
/* Member of an object by key, or NULL. */
const dp_json *dp_json_get(const dp_json *obj, const char *key);
/* "an integer", "a string", ... (for messages) */
const char *dp_json_type_name(dp_json_type t);

/* Length of the well-formed UTF-8 sequence starting at s (at most avail
 * bytes), 0 if s does not start one (ASCII bytes are not sequences here). */
size_t dp_utf8_len(const unsigned char *s, size_t avail);

/* Growable byte buffer the writers append to. */
typedef struct {
  char *p;
  size_t len, cap;
} dp_sbuf;

void dp_sbuf_add(dp_sbuf *b, const void *s, size_t n);
void dp_sbuf_puts(dp_sbuf *b, const char *s);
void dp_sbuf_putc(dp_sbuf *b, char c);
void dp_sbuf_printf(dp_sbuf *b, const char *fmt, ...) DP_PRINTF(2, 3);
void dp_sbuf_free(dp_sbuf *b);

/* "..." with JSON escapes (control characters as \u00XX; bytes >= 0x80 are
 * passed through, so UTF-8 stays UTF-8). */
void dp_json_put_string(dp_sbuf *b, const char *s, size_t n);
/* Shortest decimal that reads back as the same double, always with a '.' or
 * an exponent so that it reads back as a float (1.0, not 1); NaN, Infinity,
 * -Infinity for non-finite values. */
void dp_json_put_float(dp_sbuf *b, double v);
/* Same digits for YAML: .nan, .inf, -.inf for non-finite values. */
void dp_format_float(char *out, size_t n, double v, int yaml);

#endif
