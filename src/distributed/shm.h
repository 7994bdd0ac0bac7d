/* The shared-memory segment of a process group on one node, and the
 * futex-based waits the collectives are built from.
 *
 * Layout (offsets in the header, so every rank agrees):
 *   header | rank control blocks | channel control blocks |
 *   staging slots (2 per rank) | p2p channels (2 buffers per ordered pair) |
 *   pools (one region per rank, for alloc_shared)
 * The file is sparse: only the header, control blocks and slots are
 * allocated up front; channel buffers and pool blocks get their pages when
 * first used (fallocate, so running out of shared memory is an error, not a
 * SIGBUS).
 *
 * The segment has no name anywhere: the leader creates it with memfd_create
 * and publishes its pid and descriptor number; the others open the same
 * file through /proc/<pid>/fd/<n> (while the leader lives, which it does
 * until they all have: header->mapped counts them), and check the header's
 * name, which carries the job token. The memory goes when the last process
 * that maps it exits, however any of them dies: nothing is ever left in
 * /dev/shm (a name there outlived a kill -9 that came between its creation
 * and its unlinking). */
#ifndef DP_SHM_H
#define DP_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What every rank publishes when it enters a collective. */
typedef struct {
  int32_t kind;  /* op_kind (pg_cpu.h) */
  int32_t redop; /* dp_redop, -1 when the op does not reduce */
  int32_t dtype;
  int32_t root;  /* global rank, -1 when none */
  int64_t count; /* elements per rank (input of all_gather, output of reduce_scatter) */
} coll_desc;

typedef struct {
  _Atomic uint32_t step; /* futex word: synchronisation steps completed */
  _Atomic uint32_t step_waiters;
  _Atomic uint64_t arrived; /* sequence number of the last collective entered */
  _Atomic int32_t pid;
  int32_t pad0;
  /* By sequence parity: a rank can be one collective ahead of a peer that
   * is still reading its entry for the previous one. */
  coll_desc desc[2];   /* what the rank called */
  int64_t pool_off[2]; /* its data is in this rank's pool at this offset, or -1 */
  char pad[128 - 88];
} shm_rank_ctl;
_Static_assert(sizeof(shm_rank_ctl) == 128, "one rank control block = two cache lines");

/* One direction of a point-to-point channel. */
typedef struct {
  _Atomic uint32_t sent; /* chunks written by the sender */
  _Atomic uint32_t sent_waiters;
  _Atomic uint32_t acked; /* chunks consumed by the receiver */
  _Atomic uint32_t acked_waiters;
  _Atomic uint32_t touched; /* buffers allocated (fallocate) */
  char pad[64 - 20];
} shm_chan_ctl;
_Static_assert(sizeof(shm_chan_ctl) == 64, "one channel control block = one cache line");

/* Header of every channel buffer: the message it belongs to. */
typedef struct {
  uint64_t nbytes;
  int64_t count;
  int32_t dtype;
  int32_t pad;
  char pad2[64 - 24];
} shm_chan_hdr;

typedef struct {
  uint64_t magic;
  uint32_t nlocal, pad0;
  uint64_t total, slot_bytes, chan_bytes, pool_bytes, pool_stride; /* pool i at pools_off + i * pool_stride */
  uint64_t ctl_off, chan_ctl_off, slots_off, chans_off, pools_off;
  _Atomic uint32_t mapped; /* futex word: ranks that mapped the segment */
  _Atomic uint32_t aborted;
  int32_t abort_rank;
  char abort_msg[512];
  char name[256]; /* the leader's name for it: what the others expect */
} shm_header;

typedef struct pool_range pool_range;

typedef struct shm_seg {
  atomic_int refs;
  int fd;
  char name[256];
  uint8_t *base;
  size_t size;
  shm_header *hdr;
  int nlocal, me;
  /* my pool region: sorted free ranges (offsets within the region), and
   * freed ranges whose pages are kept for a request of the same size */
  pthread_mutex_t pool_mu;
  pool_range *free;
  int n_free, cap_free;
  pool_range *kept;
  int n_kept, cap_kept;
  size_t kept_bytes, keep_max; /* keep_max: DDPLUA_SHM_KEEP_MB (default 512) */
} shm_seg;

typedef struct {
  size_t slot_bytes, chan_bytes, pool_bytes;
} shm_sizes;

/* Sizes from the environment (DDPLUA_SHM_SLOT_KB, DDPLUA_SHM_POOL_MB) or
 * defaults. */
shm_sizes shm_default_sizes(void);
/* Leader: creates and maps (NULL + dp_error naming the segment). Its
 * descriptor (s->fd) and pid are what the others need. */
shm_seg *shm_create(const char *name, int nlocal, shm_sizes sz);
/* Others: maps the segment the leader (pid) holds as descriptor fd,
 * checking that it is `name`, and counts itself in. */
shm_seg *shm_attach(const char *name, int pid, int fd, int me, int nlocal);
/* Leader: waits until every rank mapped (then it may exit at any time). */
int shm_wait_mapped(shm_seg *s, int64_t deadline_ms);
void shm_seg_retain(shm_seg *s);
void shm_seg_release(shm_seg *s);

static inline shm_rank_ctl *shm_ctl(shm_seg *s, int i) { return (shm_rank_ctl *)(s->base + s->hdr->ctl_off) + i; }
static inline uint8_t *shm_slot(shm_seg *s, int i, uint32_t parity) {
  return s->base + s->hdr->slots_off + ((size_t)i * 2 + (parity & 1)) * s->hdr->slot_bytes;
}
static inline shm_chan_ctl *shm_chan(shm_seg *s, int from, int to) {
  return (shm_chan_ctl *)(s->base + s->hdr->chan_ctl_off) + (size_t)from * (size_t)s->nlocal + (size_t)to;
}
uint8_t *shm_chan_buf(shm_seg *s, int from, int to, uint32_t parity);
static inline uint8_t *shm_pool_base(shm_seg *s, int i) {
  return s->base + s->hdr->pools_off + (size_t)i * s->hdr->pool_stride;
}

/* ---- waiting ---- */
enum { SHM_OK = 0, SHM_TIMEOUT = 1, SHM_DEAD = 2, SHM_ABORTED = 3 };

typedef struct {
  shm_seg *seg;
  int64_t deadline_ms;
  int spin;      /* microseconds of busy waiting before sleeping */
  int watch_pid; /* process whose death ends the wait (0: none) */
} shm_wait;

/* Stores v and wakes sleepers if there are any. */
void shm_post(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t v);
/* Waits until (int32)(*word - target) >= 0. */
int shm_wait_ge(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t target, const shm_wait *w);
static inline bool shm_ge(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }
/* Marks the segment aborted (first message wins) and wakes every waiter. */
void shm_abort(shm_seg *s, int rank, const char *msg);
bool shm_pid_alive(int pid);
/* Busy-wait microseconds suited to nlocal ranks on this machine's cores
 * (DDPLUA_SPIN_US overrides). */
int shm_default_spin(int nlocal);

/* ---- pool (alloc_shared) ---- */
/* Reserves nbytes (rounded to pages) in my region and allocates its pages.
 * Returns the offset within the region, or -1 (region full, memory full). */
int64_t shm_pool_alloc(shm_seg *s, size_t nbytes);
void shm_pool_free(shm_seg *s, int64_t off, size_t nbytes);

#endif
