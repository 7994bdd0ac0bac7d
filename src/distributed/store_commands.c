/* The store server's key table and its commands (store.h has the protocol,
 * store_wire.h the encoding). Runs on the server thread only. */
#include "distributed/store_commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "distributed/store_wire.h"

struct kv {
  char *key;
  uint8_t *val;
  size_t len;
  struct kv *next;
};

static unsigned hash_key(const char *k) {
  unsigned h = 2166136261u;
  for (; *k; k++) h = (h ^ (uint8_t)*k) * 16777619u;
  return h & 255;
}

static kv *kv_find(kv_table *t, const char *key) {
  for (kv *e = t->chain[hash_key(key)]; e; e = e->next)
    if (strcmp(e->key, key) == 0) return e;
  return NULL;
}

static void kv_put(kv_table *t, const char *key, const uint8_t *val, size_t len) {
  kv *e = kv_find(t, key);
  if (!e) {
    e = dp_xcalloc(1, sizeof *e);
    e->key = dp_xstrdup(key);
    unsigned h = hash_key(key);
    e->next = t->chain[h];
    t->chain[h] = e;
    t->n_keys++;
  }
  free(e->val);
  e->val = dp_xmalloc(len + 1);
  if (len) memcpy(e->val, val, len);
  e->val[len] = 0;
  e->len = len;
}

static void kv_free(kv *e) {
  free(e->key);
  free(e->val);
  free(e);
}

/* Deletes key, or (prefix) every key starting with it; returns how many. */
static uint64_t kv_delete(kv_table *t, const char *key, bool prefix) {
  uint64_t n = 0;
  size_t kl = strlen(key);
  for (unsigned h = prefix ? 0 : hash_key(key); h < 256; h++) {
    for (kv **pp = &t->chain[h]; *pp;) {
      kv *e = *pp;
      if (prefix ? strncmp(e->key, key, kl) == 0 : strcmp(e->key, key) == 0) {
        *pp = e->next;
        kv_free(e);
        t->n_keys--;
        n++;
      } else {
        pp = &e->next;
      }
    }
    if (!prefix) break;
  }
  return n;
}

void store_table_free(kv_table *t) {
  for (int i = 0; i < 256; i++)
    while (t->chain[i]) {
      kv *n = t->chain[i]->next;
      kv_free(t->chain[i]);
      t->chain[i] = n;
    }
  t->n_keys = 0;
}

static void reply(conn *c, uint8_t status, const void *body, size_t len) {
  size_t need = c->out_len + 5 + len;
  if (need > c->out_cap) {
    c->out_cap = need * 2;
    c->out = dp_xrealloc(c->out, c->out_cap);
  }
  put_u32(c->out + c->out_len, (uint32_t)(1 + len));
  c->out[c->out_len + 4] = status;
  if (len) memcpy(c->out + c->out_len + 5, body, len);
  c->out_len += 5 + len;
}

void store_clear_wait(conn *c) {
  for (int i = 0; i < c->n_wait_keys; i++) free(c->wait_keys[i]);
  free(c->wait_keys);
  c->wait_keys = NULL;
  c->n_wait_keys = 0;
  c->waiting = false;
}

void store_try_wait(kv_table *t, conn *c, int64_t now) {
  if (!c->waiting) return;
  int first = -1;
  bool all = true;
  for (int i = 0; i < c->n_wait_keys; i++) {
    bool have = kv_find(t, c->wait_keys[i]) != NULL;
    if (have && first < 0) first = i;
    all = all && have;
    if (c->wait_cmd == CMD_WAIT_ANY ? have : !all) break;
  }
  if (c->wait_cmd == CMD_WAIT_ANY ? first >= 0 : all) {
    if (c->wait_cmd == CMD_GET) {
      kv *e = kv_find(t, c->wait_keys[0]);
      reply(c, ST_OK, e->val, e->len);
    } else if (c->wait_cmd == CMD_WAIT_ANY) {
      uint8_t idx[4];
      put_u32(idx, (uint32_t)first);
      reply(c, ST_OK, idx, 4);
    } else {
      reply(c, ST_OK, NULL, 0);
    }
    store_clear_wait(c);
  } else if (c->deadline >= 0 && now >= c->deadline) {
    /* body: the keys still missing, newline-separated */
    size_t len = 0;
    for (int i = 0; i < c->n_wait_keys; i++)
      if (!kv_find(t, c->wait_keys[i])) len += strlen(c->wait_keys[i]) + 1;
    char *body = dp_xmalloc(len + 1), *p = body;
    for (int i = 0; i < c->n_wait_keys; i++)
      if (!kv_find(t, c->wait_keys[i])) p += sprintf(p, "%s\n", c->wait_keys[i]);
    reply(c, ST_TIMEOUT, body, len);
    free(body);
    store_clear_wait(c);
  }
}

/* A key of kl bytes at p: 1..MAX_KEY bytes, no NUL. */
static bool key_ok(const uint8_t *p, size_t kl) { return kl > 0 && kl <= MAX_KEY && !memchr(p, 0, kl); }

/* Reads keys (u32 n, then n x (u32 len, bytes)). Returns -1 if malformed. */
static int parse_keys(const uint8_t *p, size_t len, char ***keys, int *n) {
  if (len < 4) return -1;
  uint32_t cnt = get_u32(p);
  if (cnt == 0 || cnt > 65536 || cnt > (len - 4) / 5) return -1; /* each key takes >= 5 bytes */
  p += 4, len -= 4;
  char **ks = dp_xcalloc(cnt, sizeof *ks);
  for (uint32_t i = 0; i < cnt; i++) {
    if (len < 4) goto bad;
    uint32_t kl = get_u32(p);
    p += 4, len -= 4;
    if (kl > len || !key_ok(p, kl)) goto bad;
    ks[i] = dp_xmalloc(kl + 1);
    memcpy(ks[i], p, kl);
    ks[i][kl] = 0;
    p += kl, len -= kl;
  }
  if (len != 0) goto bad;
  *keys = ks;
  *n = (int)cnt;
  return 0;
bad:
  for (uint32_t i = 0; i < cnt; i++) free(ks[i]);
  free(ks);
  return -1;
}

/* An on-close block: n x (u32 klen, key, u32 vlen, value), well formed. */
static bool on_close_ok(const uint8_t *p, size_t len) {
  while (len) {
    if (len < 4) return false;
    uint32_t kl = get_u32(p);
    if (kl > len - 4 || !key_ok(p + 4, kl)) return false;
    p += 4 + kl, len -= 4 + kl;
    if (len < 4) return false;
    uint32_t vl = get_u32(p);
    if (vl > len - 4) return false;
    p += 4 + vl, len -= 4 + vl;
  }
  return true;
}

bool store_run_on_close(kv_table *t, conn *c) {
  const uint8_t *p = c->on_close;
  size_t len = c->on_close_len;
  bool any = false;
  char key[MAX_KEY + 1];
  while (len) { /* validated when it came in */
    uint32_t kl = get_u32(p);
    memcpy(key, p + 4, kl);
    key[kl] = 0;
    p += 4 + kl, len -= 4 + kl;
    uint32_t vl = get_u32(p);
    kv_put(t, key, p + 4, vl);
    p += 4 + vl, len -= 4 + vl;
    any = true;
  }
  free(c->on_close);
  c->on_close = NULL;
  c->on_close_len = 0;
  return any;
}

/* Equal in time independent of where they differ (the token). */
static bool same_secret(const uint8_t *a, size_t an, const char *b) {
  size_t bn = strlen(b);
  unsigned diff = an != bn;
  for (size_t i = 0; i < an && i < bn; i++) diff |= a[i] ^ (uint8_t)b[i];
  return diff == 0;
}

int store_handle(kv_table *t, conn *c, const char *token, const uint8_t *msg, size_t len) {
  if (len < 1) return -1;
  uint8_t cmd = msg[0];
  const uint8_t *b = msg + 1;
  size_t bl = len - 1;
  if (!c->authed) {
    if (cmd != CMD_HELLO) return -1;
    if (!same_secret(b, bl, token)) {
      /* said, so that the client can tell a wrong token from an overload */
      reply(c, ST_ERROR, "wrong job token", 15);
      c->closing = true;
      return 0;
    }
    c->authed = true;
    reply(c, ST_OK, NULL, 0);
    return 0;
  }
  if (c->waiting) return -1; /* one request at a time */
  char key[MAX_KEY + 1];
  switch (cmd) {
  case CMD_SET: {
    if (bl < 4) return -1;
    uint32_t kl = get_u32(b);
    if (kl > bl - 4 || !key_ok(b + 4, kl)) return -1;
    memcpy(key, b + 4, kl);
    key[kl] = 0;
    kv_put(t, key, b + 4 + kl, bl - 4 - kl);
    reply(c, ST_OK, NULL, 0);
    return 1; /* a key changed: re-check waiters */
  }
  case CMD_ADD: {
    if (bl < 9 || !key_ok(b + 8, bl - 8)) return -1;
    int64_t delta = (int64_t)get_u64(b);
    memcpy(key, b + 8, bl - 8);
    key[bl - 8] = 0;
    kv *e = kv_find(t, key);
    int64_t v = 0;
    if (e) v = strtoll((const char *)e->val, NULL, 10);
    v = (int64_t)((uint64_t)v + (uint64_t)delta); /* wraps instead of overflowing */
    char num[32];
    int k = snprintf(num, sizeof num, "%lld", (long long)v);
    kv_put(t, key, (const uint8_t *)num, (size_t)k);
    uint8_t out[8];
    put_u64(out, (uint64_t)v);
    reply(c, ST_OK, out, 8);
    return 1;
  }
  case CMD_GET:
  case CMD_WAIT:
  case CMD_WAIT_ANY: {
    if (bl < 4) return -1;
    int32_t tmo = (int32_t)get_u32(b);
    char **keys;
    int n;
    if (parse_keys(b + 4, bl - 4, &keys, &n)) return -1;
    if (cmd == CMD_GET && n != 1) {
      for (int i = 0; i < n; i++) free(keys[i]);
      free(keys);
      return -1;
    }
    c->waiting = true;
    c->wait_cmd = cmd;
    c->wait_keys = keys;
    c->n_wait_keys = n;
    c->deadline = tmo < 0 ? -1 : now_ms() + tmo;
    store_try_wait(t, c, now_ms());
    return 0;
  }
  case CMD_CHECK: {
    char **keys;
    int n;
    if (parse_keys(b, bl, &keys, &n)) return -1;
    uint8_t ok = 1;
    for (int i = 0; i < n; i++) {
      if (!kv_find(t, keys[i])) ok = 0;
      free(keys[i]);
    }
    free(keys);
    reply(c, ST_OK, &ok, 1);
    return 0;
  }
  case CMD_DELETE:
  case CMD_DELETE_PREFIX: {
    if (!key_ok(b, bl)) return -1;
    memcpy(key, b, bl);
    key[bl] = 0;
    uint8_t out[8];
    put_u64(out, kv_delete(t, key, cmd == CMD_DELETE_PREFIX));
    reply(c, ST_OK, out, cmd == CMD_DELETE_PREFIX ? 8 : 0);
    return 0;
  }
  case CMD_ON_CLOSE: {
    if (bl > MAX_ON_CLOSE || !on_close_ok(b, bl)) return -1;
    free(c->on_close);
    c->on_close = bl ? dp_xmalloc(bl) : NULL;
    if (bl) memcpy(c->on_close, b, bl);
    c->on_close_len = bl;
    reply(c, ST_OK, NULL, 0);
    return 0;
  }
  default: return -1;
  }
}
