/* The rendezvous store: a small TCP key-value server (set / get with a
 * deadline / add / wait / check / delete) that the ranks of a job use to
 * find each other (NCCL unique ids, shared-memory segment names, TCP
 * addresses, barrier counters).
 *
 * Wire format (all integers little-endian): every message is
 *   u32 length | u8 command | body
 * A connection must start with HELLO carrying the job token, within
 * DP_STORE_AUTH_TIMEOUT_MS of connecting; a wrong token is answered with a
 * refusal, anything else (no HELLO in time, an oversized or malformed
 * message) closes that connection, and the server keeps serving the others.
 * At most DP_STORE_MAX_UNAUTHED connections wait for their HELLO at once (a
 * new one closes the oldest), each costing a few hundred bytes, and running
 * out of file descriptors makes room or backs off instead of spinning
 * (store_server.c): strangers flooding the port cannot starve the job. The
 * server is one thread with a poll loop; blocking GET/WAIT/WAIT_ANY are
 * parked and answered when the key appears or their deadline passes.
 *
 * Every connection has TCP keepalive (keepalive.h): a peer whose machine is
 * gone is noticed in seconds. A connection may leave keys behind it
 * (dp_store_on_close): the server sets them when the connection drops
 * without having cleared them, which is how the nodes' hosts learn that
 * another host vanished. */
#ifndef DP_STORE_H
#define DP_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_store_server dp_store_server;
typedef struct dp_store dp_store;

enum { DP_STORE_AUTH_TIMEOUT_MS = 3000, DP_STORE_MAX_UNAUTHED = 128 };

/* Starts serving on bind_addr:port (port 0 picks a free one, written to
 * *port_out). NULL + dp_error (e.g. "port 8009 on 127.0.0.1 is already in
 * use") on failure. */
dp_store_server *dp_store_server_start(const char *bind_addr, int port, const char *token, int *port_out);
void dp_store_server_stop(dp_store_server *s);
/* The two halves of dp_store_server_start, for a process that must fork
 * workers before it has any thread (a forked child inherits locks other
 * threads hold): bind + listen (returns the fd, -1 + dp_error), and later
 * serve on it (takes the fd over). Connections made in between wait in the
 * listen queue. */
int dp_store_listen(const char *bind_addr, int port, int *port_out);
dp_store_server *dp_store_server_start_fd(int listen_fd, const char *token);
/* Other limits than DP_STORE_AUTH_TIMEOUT_MS and DP_STORE_MAX_UNAUTHED
 * (tests); they apply from the server's next wake-up. */
void dp_store_server_set_limits(dp_store_server *s, int auth_timeout_ms, int max_unauthed);
/* What the server did with connections so far (any thread may ask). */
typedef struct {
  uint64_t accepted;     /* connections accepted */
  uint64_t expired;      /* closed for not authenticating in time */
  uint64_t evicted;      /* unauthenticated ones closed to make room */
  uint64_t fd_exhausted; /* accept() found no file descriptor */
  int unauthed;          /* waiting for their HELLO now */
} dp_store_server_stats;
void dp_store_server_get_stats(dp_store_server *s, dp_store_server_stats *st);

/* Connects, retrying until timeout_ms (the server may start later, or be
 * busy closing strangers' connections); a wrong token is refused at once
 * ("... refused the job token"). */
dp_store *dp_store_connect(const char *host, int port, const char *token, int timeout_ms);
void dp_store_close(dp_store *s);

int dp_store_set(dp_store *s, const char *key, const void *val, size_t len);
/* Blocks until key exists or timeout_ms passes (error naming the key).
 * *val is malloc'ed (NUL-terminated for convenience). */
int dp_store_get(dp_store *s, const char *key, void **val, size_t *len, int timeout_ms);
/* Atomically adds delta to the integer at key (missing = 0); new value. */
int dp_store_add(dp_store *s, const char *key, int64_t delta, int64_t *result);
/* Blocks until every key exists; on timeout the error lists the missing. */
int dp_store_wait(dp_store *s, const char *const *keys, int n, int timeout_ms);
/* *ok = 1 if every key exists now. */
int dp_store_check(dp_store *s, const char *const *keys, int n, int *ok);
int dp_store_delete(dp_store *s, const char *key);
/* Deletes every key that starts with prefix; *n (may be NULL) = how many. */
int dp_store_delete_prefix(dp_store *s, const char *prefix, uint64_t *n);
/* Blocks until one of the keys exists; *which = the first of them (in the
 * order given) that does. On timeout the error lists them. */
int dp_store_wait_any(dp_store *s, const char *const *keys, int n, int timeout_ms, int *which);
/* Keys the server sets (keys[i] = vals[i], lens[i] bytes) if this
 * connection drops before it calls this again with n = 0; replaces what an
 * earlier call registered. */
int dp_store_on_close(dp_store *s, const char *const *keys, const char *const *vals, const size_t *lens, int n);
/* The local IPv4 address of the connection to the store (the interface
 * that reaches the master: what peers on other nodes can connect to). */
int dp_store_local_addr(dp_store *s, char *buf, size_t n);

/* A fresh random job token (hex) in buf (>= 33 bytes). */
void dp_store_make_token(char *buf, size_t n);

#endif
