/* Shared-memory segment of a process group on one node: creation, mapping
 * (shm.h: a memfd, never a name), futex waits, the abort flag and the
 * alloc_shared pool. */
#include "distributed/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/spin_env.h"

#define SHM_MAGIC 0x31676573756c6464ull /* "ddluseg1" */
#define PAGE ((size_t)4096)

struct pool_range {
  size_t off, len;
};

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t env_size(const char *name, size_t dflt, size_t unit, size_t lo, size_t hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  if (*end || x * unit < lo || x * unit > hi) return dflt;
  return (size_t)x * unit;
}

shm_sizes shm_default_sizes(void) {
  shm_sizes s;
  /* 1 MiB per slot (half of a rank's staging area): room for a 512 KiB
   * all_reduce chunk and its reduced slice; broadcast and gathers move up to
   * a slot per step */
  s.slot_bytes = round_up(env_size("DDPLUA_SHM_SLOT_KB", 1 << 20, 1024, 64 << 10, 64 << 20), PAGE);
  s.chan_bytes = 128 << 10;
  /* pool: address space only; pages are allocated per alloc_shared */
  s.pool_bytes = round_up(env_size("DDPLUA_SHM_POOL_MB", (size_t)1 << 30, 1 << 20, 0, (size_t)1 << 40), PAGE);
  return s;
}

/* The ranks' pools do not start a power of two apart. DDP allocates its
 * buckets in the same order on every rank, so a bucket sits at the same
 * offset of each rank's pool, and the two-rank all_reduce reads and writes
 * both copies in one loop. With pools exactly 1 GiB apart those addresses
 * agreed in their low 28 bits, and on the AMD EPYC here (whose L1 data
 * cache picks a way from a hash of the linear address) each pair of lines
 * then evicted the other: the fused pass over two 2 MiB halves took
 * 1.6-1.9 ms instead of 0.077 (a 4 MiB shared all_reduce 2.3 GB/s). A gap
 * of 1 GiB + 64 bytes was still 2.7x slow, 1 GiB + 4 KiB or more at full
 * speed; 68 KiB per rank keeps every pair of ranks' pools apart by a
 * different non-zero multiple of it below 256 MiB for up to 64 ranks. */
#define POOL_SKEW ((size_t)68 << 10)

static void layout(shm_header *h, int nlocal, shm_sizes sz) {
  size_t n = (size_t)nlocal;
  h->magic = SHM_MAGIC;
  h->nlocal = (uint32_t)nlocal;
  h->slot_bytes = sz.slot_bytes;
  h->chan_bytes = sz.chan_bytes;
  h->pool_bytes = sz.pool_bytes;
  h->ctl_off = PAGE;
  h->chan_ctl_off = round_up(h->ctl_off + n * sizeof(shm_rank_ctl), PAGE);
  h->slots_off = round_up(h->chan_ctl_off + n * n * sizeof(shm_chan_ctl), PAGE);
  h->chans_off = h->slots_off + n * 2 * sz.slot_bytes;
  h->pools_off = h->chans_off + n * n * 2 * sz.chan_bytes;
  h->pool_stride = sz.pool_bytes + POOL_SKEW;
  h->total = h->pools_off + n * h->pool_stride;
}

static shm_seg *seg_new(const char *name, int fd, void *base, size_t size, int me, int nlocal) {
  shm_seg *s = dp_xcalloc(1, sizeof *s);
  atomic_init(&s->refs, 1);
  s->fd = fd;
  snprintf(s->name, sizeof s->name, "%s", name);
  s->base = base;
  s->size = size;
  s->hdr = base;
  s->me = me;
  s->nlocal = nlocal;
  pthread_mutex_init(&s->pool_mu, NULL);
  s->cap_free = 8;
  s->free = dp_xmalloc(sizeof(pool_range) * (size_t)s->cap_free);
  s->free[0] = (pool_range){0, s->hdr->pool_bytes};
  s->n_free = s->hdr->pool_bytes ? 1 : 0;
  s->keep_max = env_size("DDPLUA_SHM_KEEP_MB", (size_t)512 << 20, 1 << 20, 0, (size_t)1 << 40);
  return s;
}

shm_seg *shm_create(const char *name, int nlocal, shm_sizes sz) {
  shm_header h = {0};
  layout(&h, nlocal, sz);
  snprintf(h.name, sizeof h.name, "%s", name);
  int fd = memfd_create(name[0] == '/' ? name + 1 : name, MFD_CLOEXEC);
  if (fd < 0) {
    dp_error("cannot create the shared memory segment %s: %s", name, strerror(errno));
    return NULL;
  }
  /* allocate what is used from the start, so that a lack of memory fails here */
  int err = ftruncate(fd, (off_t)h.total) ? errno : posix_fallocate(fd, 0, (off_t)h.chans_off);
  void *base = err ? MAP_FAILED : mmap(NULL, h.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!err && base == MAP_FAILED) err = errno;
  if (err) {
    close(fd);
    dp_error("cannot allocate the %.1f MiB shared memory segment %s: %s", (double)h.chans_off / 1048576.0, name,
             err == ENOSPC ? "no shared memory left" : strerror(err));
    return NULL;
  }
  memcpy(base, &h, sizeof h);
  shm_header *hd = base;
  atomic_store(&hd->mapped, 1);
  shm_seg *s = seg_new(name, fd, base, h.total, 0, nlocal);
  atomic_store(&shm_ctl(s, 0)->pid, (int32_t)getpid());
  return s;
}

shm_seg *shm_attach(const char *name, int pid, int leader_fd, int me, int nlocal) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, leader_fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    dp_error("cannot open the node's shared memory segment %s through %s: %s", name, path, strerror(errno));
    return NULL;
  }
  struct stat st;
  shm_header h;
  if (fstat(fd, &st) || (size_t)st.st_size < sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
      h.magic != SHM_MAGIC || h.nlocal != (uint32_t)nlocal || h.total != (uint64_t)st.st_size ||
      strncmp(h.name, name, sizeof h.name) != 0) {
    close(fd);
    dp_error("%s is not the shared memory segment %s for %d local ranks", path, name, nlocal);
    return NULL;
  }
  void *base = mmap(NULL, h.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    dp_error("cannot map the shared memory segment %s: %s", name, strerror(errno));
    close(fd);
    return NULL;
  }
  shm_seg *s = seg_new(name, fd, base, h.total, me, nlocal);
  atomic_store(&shm_ctl(s, me)->pid, (int32_t)getpid());
  atomic_fetch_add(&s->hdr->mapped, 1);
  syscall(SYS_futex, &s->hdr->mapped, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  return s;
}

int shm_wait_mapped(shm_seg *s, int64_t deadline_ms) {
  for (;;) {
    uint32_t v = atomic_load(&s->hdr->mapped);
    if (v >= (uint32_t)s->nlocal) break;
    int64_t left = deadline_ms - mono_ms();
    if (left <= 0) return dp_error("only %u of %d local ranks mapped the shared memory segment in time", v, s->nlocal);
    struct timespec ts = {left / 1000, (left % 1000) * 1000000};
    syscall(SYS_futex, &s->hdr->mapped, FUTEX_WAIT, v, &ts, NULL, 0);
  }
  return 0;
}

void shm_seg_retain(shm_seg *s) { atomic_fetch_add(&s->refs, 1); }

void shm_seg_release(shm_seg *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  munmap(s->base, s->size);
  close(s->fd);
  pthread_mutex_destroy(&s->pool_mu);
  free(s->free);
  free(s->kept);
  free(s);
}

uint8_t *shm_chan_buf(shm_seg *s, int from, int to, uint32_t parity) {
  size_t pair = (size_t)from * (size_t)s->nlocal + (size_t)to;
  size_t off = s->hdr->chans_off + (pair * 2 + (parity & 1)) * s->hdr->chan_bytes;
  shm_chan_ctl *c = shm_chan(s, from, to);
  /* the sender allocates the channel's pages on first use (the receiver
   * sees them through the shared file) */
  if (from == s->me && !atomic_load_explicit(&c->touched, memory_order_acquire)) {
    if (posix_fallocate(s->fd, (off_t)(off - (parity & 1) * s->hdr->chan_bytes), (off_t)(2 * s->hdr->chan_bytes)))
      return NULL;
    atomic_store_explicit(&c->touched, 1, memory_order_release);
  }
  return s->base + off;
}

/* ---- waiting ---- */

static long futex_wait(_Atomic uint32_t *w, uint32_t v, int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  return syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w) { syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

void shm_post(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t v) {
  /* seq_cst store then load: pairs with the waiter's increment-then-load,
   * so either the waiter sees v or we see the waiter */
  atomic_store(word, v);
  if (atomic_load(waiters)) futex_wake_all(word);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

bool shm_pid_alive(int pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  /* a dead child not yet reaped still answers kill(); look at its state */
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f) return true;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return !(p && (p[2] == 'Z' || p[2] == 'X'));
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int shm_wait_ge(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t target, const shm_wait *w) {
  if (shm_ge(atomic_load_explicit(word, memory_order_acquire), target)) return SHM_OK;
  /* spin for a bounded time (not a count: under a hypervisor one pause can
   * cost 200 ns), then sleep */
  if (w->spin > 0) {
    int64_t end = mono_ns() + (int64_t)w->spin * 1000;
    do {
      for (int i = 0; i < 8; i++) {
        if (shm_ge(atomic_load_explicit(word, memory_order_acquire), target)) return SHM_OK;
        cpu_relax();
      }
    } while (mono_ns() < end);
  }
  int64_t last_check = mono_ms();
  for (;;) {
    atomic_fetch_add(waiters, 1);
    uint32_t v = atomic_load(word);
    if (shm_ge(v, target)) {
      atomic_fetch_sub(waiters, 1);
      return SHM_OK;
    }
    if (atomic_load(&w->seg->hdr->aborted)) {
      atomic_fetch_sub(waiters, 1);
      return SHM_ABORTED;
    }
    int64_t now = mono_ms(), left = w->deadline_ms - now;
    if (left <= 0) {
      atomic_fetch_sub(waiters, 1);
      return SHM_TIMEOUT;
    }
    /* sleep in slices: the peer's liveness is checked between them */
    futex_wait(word, v, left < 100 ? left : 100);
    atomic_fetch_sub(waiters, 1);
    if (shm_ge(atomic_load(word), target)) return SHM_OK;
    now = mono_ms();
    if (w->watch_pid && now - last_check >= 100) {
      last_check = now;
      if (!shm_pid_alive(w->watch_pid)) return shm_ge(atomic_load(word), target) ? SHM_OK : SHM_DEAD;
    }
  }
}

void shm_abort(shm_seg *s, int rank, const char *msg) {
  uint32_t expected = 0;
  if (atomic_compare_exchange_strong(&s->hdr->aborted, &expected, 2)) {
    s->hdr->abort_rank = rank;
    snprintf(s->hdr->abort_msg, sizeof s->hdr->abort_msg, "%s", msg);
    atomic_store(&s->hdr->aborted, 1);
  }
  for (int i = 0; i < s->nlocal; i++) {
    futex_wake_all(&shm_ctl(s, i)->step);
    for (int j = 0; j < s->nlocal; j++) {
      futex_wake_all(&shm_chan(s, i, j)->sent);
      futex_wake_all(&shm_chan(s, i, j)->acked);
    }
  }
}

int shm_default_spin(int nlocal) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  /* more ranks than cores: a spinning rank holds the core its peer needs */
  return dp_spin_us_env(nlocal > ncpu ? 0 : 20);
}

/* ---- pool ---- */

/* A freed range's pages stay in the file for the next request of the same
 * size, up to keep_max bytes (DDPLUA_SHM_KEEP_MB, default 512; 0: none):
 * a DDP reducer made again (a `--watch` rerun, a model wrapped anew) gets
 * its buckets back without the kernel allocating, zeroing and faulting in
 * every page again (24 ms of 25 for a 7.4 MB model's buckets on the
 * 2026-12 VM, where a shared page's first touch costs ~13 us). A request
 * no kept range fits gives them all back first, so keeping never raises
 * the pool's footprint past what was live before. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Range [off, off + len) back to the system and into the sorted free
 * list (pool_mu held). */
static void release_range_locked(shm_seg *s, size_t off, size_t len) {
  /* give the pages back to the system; the range stays reserved in the file */
  fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            (off_t)(s->hdr->pools_off + (size_t)s->me * s->hdr->pool_stride + off), (off_t)len);
  int i = 0;
  while (i < s->n_free && s->free[i].off < off) i++;
  bool merge_prev = i > 0 && s->free[i - 1].off + s->free[i - 1].len == off;
  bool merge_next = i < s->n_free && off + len == s->free[i].off;
  if (merge_prev && merge_next) {
    s->free[i - 1].len += len + s->free[i].len;
    memmove(&s->free[i], &s->free[i + 1], sizeof(pool_range) * (size_t)(s->n_free - i - 1));
    s->n_free--;
  } else if (merge_prev) {
    s->free[i - 1].len += len;
  } else if (merge_next) {
    s->free[i].off = off;
    s->free[i].len += len;
  } else {
    if (s->n_free == s->cap_free) {
      s->cap_free *= 2;
      s->free = dp_xrealloc(s->free, sizeof(pool_range) * (size_t)s->cap_free);
    }
    memmove(&s->free[i + 1], &s->free[i], sizeof(pool_range) * (size_t)(s->n_free - i));
    s->free[i] = (pool_range){off, len};
    s->n_free++;
  }
}

static void release_kept_locked(shm_seg *s) {
  for (int k = 0; k < s->n_kept; k++) release_range_locked(s, s->kept[k].off, s->kept[k].len);
  s->n_kept = 0;
  s->kept_bytes = 0;
}

int64_t shm_pool_alloc(shm_seg *s, size_t nbytes) {
  size_t need = round_up(nbytes ? nbytes : 1, PAGE);
  pthread_mutex_lock(&s->pool_mu);
  for (int k = s->n_kept - 1; k >= 0; k--) /* the most recently freed first */
    if (s->kept[k].len == need) {
      size_t off = s->kept[k].off;
      s->kept[k] = s->kept[--s->n_kept];
      s->kept_bytes -= need;
      pthread_mutex_unlock(&s->pool_mu);
      memset(shm_pool_base(s, s->me) + off, 0, need); /* reads as zeros, as a fresh range does */
      return (int64_t)off;
    }
  release_kept_locked(s);
  int i = 0;
  while (i < s->n_free && s->free[i].len < need) i++;
  if (i == s->n_free) {
    pthread_mutex_unlock(&s->pool_mu);
    return -1;
  }
  size_t off = s->free[i].off;
  off_t file_off = (off_t)(s->hdr->pools_off + (size_t)s->me * s->hdr->pool_stride + off);
  if (posix_fallocate(s->fd, file_off, (off_t)need) != 0) {
    pthread_mutex_unlock(&s->pool_mu);
    return -1;
  }
  /* mapped here in one call rather than a fault per page on first touch
   * (best effort: EINVAL before Linux 5.14); a 7.4 MB bucket set: 26 -> 16 ms */
  madvise(shm_pool_base(s, s->me) + off, need, MADV_POPULATE_WRITE);
  s->free[i].off += need;
  s->free[i].len -= need;
  if (s->free[i].len == 0) {
    memmove(&s->free[i], &s->free[i + 1], sizeof(pool_range) * (size_t)(s->n_free - i - 1));
    s->n_free--;
  }
  pthread_mutex_unlock(&s->pool_mu);
  return (int64_t)off;
}

void shm_pool_free(shm_seg *s, int64_t off64, size_t nbytes) {
  size_t off = (size_t)off64, len = round_up(nbytes ? nbytes : 1, PAGE);
  pthread_mutex_lock(&s->pool_mu);
  if (s->kept_bytes + len <= s->keep_max) {
    if (s->n_kept == s->cap_kept) {
      s->cap_kept = s->cap_kept ? 2 * s->cap_kept : 8;
      s->kept = dp_xrealloc(s->kept, sizeof(pool_range) * (size_t)s->cap_kept);
    }
    s->kept[s->n_kept++] = (pool_range){off, len};
    s->kept_bytes += len;
  } else {
    release_range_locked(s, off, len);
  }
  pthread_mutex_unlock(&s->pool_mu);
}
