/* Inside the nodes' rendezvous (host.h has its interface): the state that
 * rendezvous.c (the store connection, mailboxes, the watcher thread,
 * verdicts, the end) and membership.c (which nodes take part in each
 * generation) share. */
#ifndef DP_HOST_RDZV_H
#define DP_HOST_RDZV_H

#include <pthread.h>

#include "host/host.h"

typedef struct rdzv_msg {
  dp_rdzv_msg m;
  struct rdzv_msg *next;
} rdzv_msg;

struct dp_rdzv {
  dp_store *store, *watch_store;
  const char *addr;
  int port;
  char token[80];
  pthread_t watcher;
  bool watching;
  int wake[2];  /* watcher -> supervisor loop: one byte per message */
  int id;       /* --node_rank: the node's name, for good */
  int min, max; /* --nnodes MIN:MAX (equal: a fixed number of nodes) */
  int nproc, max_restarts;
  /* the generation */
  int gen;
  char gp[24];     /* its key prefix under host/: "" for generation 0, "g<gen>/" after */
  int n;           /* nodes taking part */
  int *ids;        /* their ids, ascending: node position p is ids[p] */
  int *first_rank; /* n + 1 entries: position p runs ranks first_rank[p] .. first_rank[p+1]-1 */
  int pos;         /* this node's position */
  /* what the watcher waits for: the mailbox, the other nodes' lost keys, joiners' keys */
  char **keys;
  int *key_node;
  int n_keys;
  pthread_mutex_t mu;
  rdzv_msg *head, *tail;
};

/* "host/<gp><what>/<node>" */
void rdzv_key(const dp_rdzv *r, char *out, size_t n, const char *what, int node);
/* "host/lost/<node>": set by the store when that node's host vanishes (any generation) */
void rdzv_lost_key(char *out, size_t n, int node);
int64_t rdzv_now_ms(void);
/* membership.c: this node's entry for generation r->gen, then the nodes that
 * take part (sets r->n, ids, first_rank, pos). 0, or -1 + dp_error. */
int rdzv_members(dp_rdzv *r, int timeout_ms);

#endif
