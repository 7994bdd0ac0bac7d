/* The store's wire format, shared by the server (store_server.c) and the
 * client (store_client.c): every message is u32 length | u8 command | body,
 * integers little-endian; replies carry a status byte instead of the
 * command. See store.h. */
#ifndef DP_STORE_WIRE_H
#define DP_STORE_WIRE_H

#include <stdint.h>
#include <time.h>

enum {
  CMD_HELLO = 1,
  CMD_SET,
  CMD_GET,
  CMD_ADD,
  CMD_WAIT,
  CMD_CHECK,
  CMD_DELETE,
  CMD_DELETE_PREFIX,
  CMD_WAIT_ANY,
  CMD_ON_CLOSE
};
enum { ST_OK = 0, ST_TIMEOUT = 1, ST_ERROR = 2 };
#define MAX_MSG (64u << 20)
#define MAX_KEY 4096u
/* at most this much on-close data per connection (CMD_ON_CLOSE) */
#define MAX_ON_CLOSE (1u << 20)

static inline int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

#endif
