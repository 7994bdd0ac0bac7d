/* Worker processes for the DataLoader (lua/ddplua/data/worker_pool.lua):
 * fork()ed copies of the process that run the dataset's Lua code, each
 * talking to the parent over a SOCK_SEQPACKET socketpair. A message is a
 * small header plus, optionally, one memfd passed with SCM_RIGHTS holding
 * the payload: a text (a batch's description, an error message) and
 * tensors, written once by the worker and mapped by the parent, which
 * makes tensors over the mapping without a copy (PyTorch's workers hand
 * batches over in shared memory the same way).
 *
 * A child dies with its parent (PR_SET_PDEATHSIG), ignores SIGINT (the
 * parent decides), drops the parent's ends of every other worker's socket
 * (so each worker sees EOF when the parent goes) and leaves with _exit:
 * nothing the parent registered (atexit, buffered stdio) runs twice. */
#ifndef DP_WORKER_PROC_H
#define DP_WORKER_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tensor/tensor.h"

enum { DP_WMSG_TASK = 1, DP_WMSG_RESULT = 2, DP_WMSG_ERROR = 3, DP_WMSG_STOP = 4 };

/* Forks a worker. Parent: returns 0, *pid and *sock (its end). Child:
 * returns 1 and *sock (the child's end). -1 + dp_error on failure. */
int dp_worker_fork(pid_t *pid, int *sock);
/* Closes a parent-side socket (and forgets it for later forks). */
void dp_worker_close(int sock);

/* Writes text and tensors (CPU; any layout) into a new memfd: returns the
 * fd, or -1 + dp_error. */
int dp_worker_pack(const char *text, size_t len, dp_tensor *const *ts, int nt);
/* Sends a header and (fd >= 0) the payload fd, which stays the caller's. */
int dp_worker_send(int sock, int kind, int64_t seq, int64_t item, int fd);

typedef struct {
  int kind;
  int64_t seq, item;
  int fd; /* -1 when none; the receiver owns it */
} dp_wmsg;
/* Waits up to timeout_ms (< 0: forever) for a message: 1 with *m, 0 on
 * timeout, -1 + dp_error on a closed peer ("closed" in the message) or an
 * error. */
int dp_worker_recv(int sock, int timeout_ms, dp_wmsg *m);

/* Maps a payload fd (closing it): the text (borrowed from *map, valid while
 * it lives) and the tensors, views of one storage that unmaps when the last
 * goes. On success *ts is malloc'd with *nt entries (the caller releases
 * them and frees the array). */
int dp_worker_unpack(int fd, const char **text, size_t *len, dp_tensor ***ts, int *nt, dp_storage **map);

/* Index of the first socket with something to read (or closed), -1 on
 * timeout. */
int dp_worker_poll(const int *socks, int n, int timeout_ms);

/* Reaps pid: waits up to grace_ms, then SIGKILLs and waits. Writes how it
 * ended ("exited with code 0", "was killed by signal 9 (SIGKILL)") into
 * out. Returns 0, or -1 when pid is not a child any more. */
int dp_worker_reap(pid_t pid, int grace_ms, char *out, size_t n);
/* 1 while pid runs; 0 once it ended (reaped, described in out); -1 not a child. */
int dp_worker_alive(pid_t pid, char *out, size_t n);

#endif
