/* Inside the store's server (store_server.c serves the connections,
 * store_commands.c holds the key table and answers the commands). */
#ifndef DP_STORE_COMMANDS_H
#define DP_STORE_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv kv;

/* The key table: 256 hash chains. */
typedef struct {
  kv *chain[256];
  size_t n_keys;
} kv_table;

/* A connection as the commands see it. */
typedef struct {
  int fd;
  bool authed;
  bool closing;      /* refused: dropped once its reply is sent */
  int64_t opened_ms; /* accept time: the authentication deadline counts from it */
  uint8_t *in;
  size_t in_len, in_cap;
  uint8_t *out;
  size_t out_len, out_off, out_cap;
  /* a parked GET / WAIT / WAIT_ANY */
  bool waiting;
  uint8_t wait_cmd;
  int64_t deadline;
  char **wait_keys;
  int n_wait_keys;
  /* keys set when the connection drops (CMD_ON_CLOSE): one block of
   * (u32 klen, key, u32 vlen, value) entries as they came on the wire */
  uint8_t *on_close;
  size_t on_close_len;
} conn;

/* Handles one complete message (command byte + body). Returns -1 to drop
 * the connection, 1 when a key changed (parked requests are re-checked),
 * 0 otherwise. `token` is the job token HELLO must carry. */
int store_handle(kv_table *t, conn *c, const char *token, const uint8_t *msg, size_t len);
/* Answers c's parked request if it can be now, or has expired. */
void store_try_wait(kv_table *t, conn *c, int64_t now);
/* Drops c's parked request (its keys). */
void store_clear_wait(conn *c);
/* Sets the keys c registered with CMD_ON_CLOSE (it has dropped). Returns
 * true when any was set. */
bool store_run_on_close(kv_table *t, conn *c);
void store_table_free(kv_table *t);

#endif
