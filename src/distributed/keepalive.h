/* TCP keepalive for the job's long-lived connections (the store's, the
 * nodes' hosts', the ranks' mesh): a peer whose machine died or dropped off
 * the network sends no FIN or RST, and without probes a blocked reader would
 * wait for its own deadline (minutes) or forever. With these settings an
 * idle connection is probed after 2 s, every second, and declared dead once
 * nothing has come back for 6 s (TCP_USER_TIMEOUT also bounds how long sent
 * data may stay unacknowledged). A live peer's kernel answers the probes even
 * when the process itself is stopped or busy, so this never fires on a slow
 * peer, only on a vanished one. */
#ifndef DP_KEEPALIVE_H
#define DP_KEEPALIVE_H

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

enum { DP_KEEPALIVE_IDLE_S = 2, DP_KEEPALIVE_INTERVAL_S = 1, DP_KEEPALIVE_DEAD_MS = 6000 };

static inline void dp_tcp_keepalive(int fd) {
  int on = 1, idle = DP_KEEPALIVE_IDLE_S, intvl = DP_KEEPALIVE_INTERVAL_S, cnt = 6;
  unsigned dead = DP_KEEPALIVE_DEAD_MS;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &dead, sizeof dead);
}

#endif
