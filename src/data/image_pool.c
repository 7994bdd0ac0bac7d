/* The image dataset and its worker pool (see image_pool.h).
 *
 * A batch request is a job: its item positions, the draw of each item, the
 * output tensor the items are written into, and one error slot per item.
 * Workers claim positions one at a time under the set's mutex (an image
 * takes far longer to decode than the lock is held) from the urgent job,
 * the one get_batch waits for, first and then from the prefetched jobs in
 * order. A claimed position belongs to its thread until it is finished, so
 * items are written without locking; the finish is recorded under the
 * mutex, which orders those writes before the reader's.
 *
 * A job dropped while workers still hold items of it goes on the orphans
 * list, which the calling thread sweeps for jobs with nothing out, so
 * tensors are only ever released on the calling thread and workers never
 * enter the tensor allocator. The urgent job is never
 * dropped: the calling thread owns it and waits for it.
 *
 * fork(): an atfork handler first holds every set's workers outside their
 * items (each finishes the image in hand), so no worker is inside malloc or
 * a decoder when the process is copied. The child gets each set without
 * its worker threads; the first call there notices the new pid, re-creates
 * the locks, drops the queue and starts a pool of its own, instead of
 * waiting forever for threads that are gone. */
#include "data/image_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_fpu.h"
#include "core/error.h"

typedef struct job_ {
  int64_t n;
  uint64_t epoch; /* set_epoch may change the set's while workers hold items of this job */
  int64_t *idx;
  uint32_t *draws;
  dp_tensor *x;
  float *xdata;
  int64_t next, finished;
  int active;
  char **err;
  bool orphaned;
  struct job_ *next_orphan;
} job;

typedef struct {
  dp_image_set *set;
  int id;
} worker_arg;

struct dp_image_set {
  char *csv;
  int64_t n;
  char **paths;
  int64_t *labels, *rows, *lines;
  int channels, height, width;
  dp_img_pipeline pipe;
  uint64_t seed, epoch;
  uint32_t *count; /* loads of each item since set_epoch; calling thread only */

  int want_workers, nworkers; /* asked for, running */
  pid_t pid;                  /* of the process the workers belong to */
  pthread_t *threads;
  worker_arg *args;
  dp_img_scratch *scratch; /* one per worker */
  dp_img_scratch own;      /* the calling thread's */
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  job *urgent;
  job *queue[DP_IMAGE_MAX_PREFETCH];
  int nq;
  job *orphans; /* dropped jobs that workers still had items of */
  bool stop;
  bool hold;                                /* a fork is being prepared: claim nothing */
  int busy;                                 /* threads inside an item */
  pthread_cond_t idle;                      /* busy fell to 0 while holding */
  struct dp_image_set *reg_prev, *reg_next; /* live sets, for the fork handlers */
  dp_image_set_stats stats;
};

/* ---- one item ---- */

static _Atomic int64_t items_loaded;
int64_t dp_image_items_loaded(void) { return atomic_load(&items_loaded); }

/* Records an item's failure, naming the CSV row; reason is the decoder's or
 * check's message. */
static char *item_error(const dp_image_set *s, int64_t i, const char *reason) {
  size_t len = strlen(s->csv) + strlen(reason) + 64;
  char *m = dp_xmalloc(len);
  snprintf(m, len, "%s: row %lld (line %lld): %s", s->csv, (long long)s->rows[i], (long long)s->lines[i], reason);
  return m;
}

/* Decodes and transforms item i with the given epoch and draw into dst (C x H x W
 * floats of the set's size); returns NULL or a malloc'ed message. */
static char *load_item(dp_image_set *s, int64_t i, uint64_t epoch, uint32_t draw, dp_img_scratch *scr, float *dst) {
  atomic_fetch_add(&items_loaded, 1);
  dp_image img;
  if (dp_image_read(s->paths[i], s->channels, &img)) return item_error(s, i, dp_errmsg());
  int oh, ow;
  dp_img_output_size(&s->pipe, img.height, img.width, &oh, &ow);
  if (oh != s->height || ow != s->width) {
    char msg[1024];
    snprintf(msg, sizeof msg,
             "image '%s' is %dx%d (HxW) after the transforms but this dataset's items are %dx%d (the size of its "
             "first item); give size={H, W} or a Resize{H, W} transform to make them all one size",
             s->paths[i], oh, ow, s->height, s->width);
    dp_image_free(&img);
    return item_error(s, i, msg);
  }
  dp_img_rng rng = dp_img_rng_for(s->seed, epoch, draw, (uint64_t)(s->rows[i] - 1));
  dp_img_apply(&s->pipe, &img, rng, scr, dst);
  dp_image_free(&img);
  return NULL;
}

static int64_t item_floats(const dp_image_set *s) { return (int64_t)s->channels * s->height * s->width; }

/* ---- jobs ---- */

static job *job_new(dp_image_set *s, const int64_t *idx, const uint32_t *draws, int64_t n) {
  int64_t shape[4] = {n, s->channels, s->height, s->width};
  dp_tensor *x = dp_empty(DP_F32, 4, shape, dp_cpu());
  if (!x) return NULL;
  job *j = dp_xcalloc(1, sizeof *j);
  j->n = n;
  j->epoch = s->epoch;
  j->x = x;
  j->xdata = dp_data(x);
  size_t m = (size_t)(n ? n : 1);
  j->idx = dp_xmalloc(m * sizeof *j->idx);
  j->draws = dp_xmalloc(m * sizeof *j->draws);
  j->err = dp_xcalloc(m, sizeof *j->err);
  memcpy(j->idx, idx, (size_t)n * sizeof *idx);
  memcpy(j->draws, draws, (size_t)n * sizeof *draws);
  return j;
}

static void job_free(job *j) {
  for (int64_t p = 0; p < j->n; p++) free(j->err[p]);
  free(j->err);
  free(j->idx);
  free(j->draws);
  dp_release(j->x);
  free(j);
}

/* Frees the orphans the workers have finished with (under the mutex, on
 * the calling thread); all of them when `all` (no worker is left). */
static void reap(dp_image_set *s, bool all) {
  for (job **pp = &s->orphans; *pp;) {
    job *j = *pp;
    if (j->active == 0 || all) {
      *pp = j->next_orphan;
      job_free(j);
    } else {
      pp = &j->next_orphan;
    }
  }
}

/* Drops queue entry q (under the mutex, on the calling thread): no more
 * claims; freed now, or after the last worker holding one of its items is
 * done with it. */
static void drop_queued(dp_image_set *s, int q) {
  job *j = s->queue[q];
  memmove(s->queue + q, s->queue + q + 1, (size_t)(s->nq - q - 1) * sizeof *s->queue);
  s->nq--;
  j->next = j->n;
  if (j->active == 0) {
    job_free(j);
  } else {
    j->orphaned = true;
    j->next_orphan = s->orphans;
    s->orphans = j;
  }
}

static job *pick_job(dp_image_set *s) {
  if (s->hold) return NULL;
  if (s->urgent && s->urgent->next < s->urgent->n) return s->urgent;
  for (int q = 0; q < s->nq; q++)
    if (s->queue[q]->next < s->queue[q]->n) return s->queue[q];
  return NULL;
}

/* Runs position pos of j (claimed under the mutex, which is released while
 * the image is decoded) and records the finish. Called with the mutex held;
 * returns with it held. */
static void run_claimed(dp_image_set *s, job *j, int64_t pos, dp_img_scratch *scr) {
  s->busy++;
  pthread_mutex_unlock(&s->mu);
  int64_t i = j->idx[pos];
  j->err[pos] = load_item(s, i, j->epoch, j->draws[pos], scr, j->xdata + pos * item_floats(s));
  pthread_mutex_lock(&s->mu);
  if (--s->busy == 0 && s->hold) pthread_cond_signal(&s->idle);
  j->active--;
  j->finished++;
  if (!j->orphaned && j->finished == j->n) pthread_cond_broadcast(&s->done);
}

static void *worker_main(void *arg) {
  worker_arg *a = arg;
  dp_image_set *s = a->set;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    job *j = NULL;
    while (!s->stop && !(j = pick_job(s))) pthread_cond_wait(&s->work, &s->mu);
    if (s->stop) break;
    int64_t pos = j->next++;
    j->active++;
    dp_fpu_sync(); /* transforms flush denormals as the training thread does */
    run_claimed(s, j, pos, &s->scratch[a->id]);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- fork handlers ---- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static dp_image_set *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Holds every set's mutex with no thread inside an item, across the fork. */
static void before_fork(void) {
  pthread_mutex_lock(&registry_mu);
  for (dp_image_set *s = registry; s; s = s->reg_next) {
    pthread_mutex_lock(&s->mu);
    s->hold = true;
    while (s->busy > 0) pthread_cond_wait(&s->idle, &s->mu);
  }
}

static void after_fork_parent(void) {
  for (dp_image_set *s = registry; s; s = s->reg_next) {
    s->hold = false;
    pthread_cond_broadcast(&s->work);
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&registry_mu);
}

/* The sets' own locks are re-created by their first use in the child
 * (same_process); the registry's is this thread's to re-create now. */
static void after_fork_child(void) {
  for (dp_image_set *s = registry; s; s = s->reg_next) s->hold = false;
  pthread_mutex_init(&registry_mu, NULL);
}

static void install_atfork(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

static void register_set(dp_image_set *s) {
  pthread_once(&atfork_once, install_atfork);
  pthread_mutex_lock(&registry_mu);
  s->reg_next = registry;
  if (registry) registry->reg_prev = s;
  registry = s;
  pthread_mutex_unlock(&registry_mu);
}

static void unregister_set(dp_image_set *s) {
  pthread_mutex_lock(&registry_mu);
  if (s->reg_prev) s->reg_prev->reg_next = s->reg_next;
  else if (registry == s) registry = s->reg_next;
  if (s->reg_next) s->reg_next->reg_prev = s->reg_prev;
  s->reg_prev = s->reg_next = NULL;
  pthread_mutex_unlock(&registry_mu);
}

/* ---- creation and shutdown ---- */

static int default_workers(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores < 4 ? (int)cores : 4;
}

/* Without a fixed Resize the batch size comes from the first item. */
static int probe_size(dp_image_set *s) {
  if (dp_img_fixed_size(&s->pipe, &s->height, &s->width)) return 0;
  s->height = s->width = 0;
  if (s->n == 0) return 0;
  dp_image img;
  if (dp_image_read(s->paths[0], s->channels, &img)) {
    char *m = item_error(s, 0, dp_errmsg());
    dp_error("%s (reading the first item to learn the image size)", m);
    free(m);
    return -1;
  }
  dp_img_output_size(&s->pipe, img.height, img.width, &s->height, &s->width);
  dp_image_free(&img);
  return 0;
}

static void init_sync(dp_image_set *s) {
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  pthread_cond_init(&s->idle, NULL);
  s->busy = 0;
  s->pid = getpid();
}

static int start_workers(dp_image_set *s) {
  s->stop = false;
  for (int w = 0; w < s->want_workers; w++) {
    s->args[w] = (worker_arg){s, w};
    int rc = pthread_create(&s->threads[w], NULL, worker_main, &s->args[w]);
    if (rc)
      return dp_error("image dataset: cannot start worker thread %d of %d: %s", w + 1, s->want_workers, strerror(rc));
    s->nworkers = w + 1;
  }
  return 0;
}

/* In a forked child: the parent's workers do not exist here, and the locks
 * may have been copied in a held state. No worker of this set runs in the
 * child, so the queued jobs can be freed whatever items they had out. */
static void forget_parent_workers(dp_image_set *s) {
  init_sync(s);
  s->nworkers = 0;
  s->urgent = NULL;
  for (int q = 0; q < s->nq; q++) job_free(s->queue[q]);
  s->nq = 0;
  reap(s, true);
}

static int adopt_after_fork(dp_image_set *s) {
  forget_parent_workers(s);
  return start_workers(s);
}

static int same_process(dp_image_set *s) { return s->pid == getpid() ? 0 : adopt_after_fork(s); }

dp_image_set *dp_image_set_new(const dp_image_set_config *cfg) {
  if (cfg->channels < 1 || cfg->channels > 4)
    return dp_error("image dataset: %d channels (expected 1, 3 or 4)", cfg->channels), NULL;
  if (cfg->n < 0) return dp_error("image dataset: %lld items", (long long)cfg->n), NULL;
  if (dp_img_pipeline_check(cfg->pipeline, cfg->channels, true)) return NULL;
  int nw = cfg->num_workers < 0 ? default_workers() : cfg->num_workers;
  if (nw > 256) return dp_error("image dataset: num_workers = %d (at most 256)", nw), NULL;
  dp_image_set *s = dp_xcalloc(1, sizeof *s);
  s->csv = dp_xstrdup(cfg->csv);
  s->n = cfg->n;
  size_t m = (size_t)(cfg->n ? cfg->n : 1);
  s->paths = dp_xmalloc(m * sizeof *s->paths);
  for (int64_t i = 0; i < cfg->n; i++) s->paths[i] = dp_xstrdup(cfg->paths[i]);
  s->labels = dp_xmalloc(m * sizeof *s->labels);
  s->rows = dp_xmalloc(m * sizeof *s->rows);
  s->lines = dp_xmalloc(m * sizeof *s->lines);
  memcpy(s->labels, cfg->labels, (size_t)cfg->n * sizeof *s->labels);
  memcpy(s->rows, cfg->rows, (size_t)cfg->n * sizeof *s->rows);
  memcpy(s->lines, cfg->lines, (size_t)cfg->n * sizeof *s->lines);
  s->count = dp_xcalloc(m, sizeof *s->count);
  s->channels = cfg->channels;
  s->pipe = *cfg->pipeline;
  s->seed = cfg->seed;
  init_sync(s);
  s->want_workers = nw;
  s->scratch = dp_xcalloc((size_t)(nw ? nw : 1), sizeof *s->scratch);
  s->threads = dp_xcalloc((size_t)(nw ? nw : 1), sizeof *s->threads);
  s->args = dp_xcalloc((size_t)(nw ? nw : 1), sizeof *s->args);
  register_set(s);
  if (probe_size(s) || start_workers(s)) {
    dp_image_set_free(s);
    return NULL;
  }
  return s;
}

void dp_image_set_free(dp_image_set *s) {
  if (!s) return;
  unregister_set(s);
  if (s->pid != getpid()) forget_parent_workers(s); /* a forked child: no worker is ours to join */
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->work);
  pthread_mutex_unlock(&s->mu);
  for (int w = 0; w < s->nworkers; w++) pthread_join(s->threads[w], NULL);
  /* every worker has finished its item, so nothing is active any more */
  while (s->nq) drop_queued(s, s->nq - 1);
  reap(s, false);
  DP_ASSERT(s->urgent == NULL);
  for (int w = 0; w < s->want_workers; w++) dp_img_scratch_free(&s->scratch[w]);
  dp_img_scratch_free(&s->own);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->done);
  pthread_cond_destroy(&s->idle);
  for (int64_t i = 0; i < s->n; i++) free(s->paths[i]);
  free(s->paths);
  free(s->labels);
  free(s->rows);
  free(s->lines);
  free(s->count);
  free(s->scratch);
  free(s->threads);
  free(s->args);
  free(s->csv);
  free(s);
}

int64_t dp_image_set_len(const dp_image_set *s) { return s->n; }
int dp_image_set_workers(const dp_image_set *s) { return s->nworkers; }
void dp_image_set_item_shape(const dp_image_set *s, int64_t shape[3]) {
  shape[0] = s->channels;
  shape[1] = s->height;
  shape[2] = s->width;
}
dp_image_set_stats dp_image_set_get_stats(const dp_image_set *s) { return s->stats; }

void dp_image_set_set_epoch(dp_image_set *s, uint64_t epoch) {
  same_process(s); /* failing to restart workers only leaves the loading to this thread */
  pthread_mutex_lock(&s->mu);
  s->stats.discarded += s->nq;
  while (s->nq) drop_queued(s, s->nq - 1);
  reap(s, false);
  pthread_mutex_unlock(&s->mu);
  s->epoch = epoch;
  memset(s->count, 0, (size_t)s->n * sizeof *s->count);
}

/* ---- requests ---- */

static int check_indices(const dp_image_set *s, const int64_t *idx, int64_t n, const char *what) {
  for (int64_t p = 0; p < n; p++)
    if (idx[p] < 0 || idx[p] >= s->n)
      return dp_error("%s: index %lld (position %lld of the indices) is out of range 1..%lld", what,
                      (long long)idx[p] + 1, (long long)p + 1, (long long)s->n);
  return 0;
}

/* The draws the items of idx get if they are loaded after the queued
 * prefetches up to (not including) queue entry `upto` have been; commits
 * the counts when `commit`. */
static void assign_draws(dp_image_set *s, const int64_t *idx, int64_t n, int upto, bool commit, uint32_t *draws) {
  for (int q = 0; q < upto; q++)
    for (int64_t p = 0; p < s->queue[q]->n; p++) s->count[s->queue[q]->idx[p]]++;
  for (int64_t p = 0; p < n; p++) draws[p] = s->count[idx[p]]++;
  if (!commit)
    for (int64_t p = 0; p < n; p++) s->count[idx[p]]--;
  for (int q = 0; q < upto; q++)
    for (int64_t p = 0; p < s->queue[q]->n; p++) s->count[s->queue[q]->idx[p]]--;
}

static bool job_matches(const job *j, const int64_t *idx, const uint32_t *draws, int64_t n) {
  return j->n == n && memcmp(j->idx, idx, (size_t)n * sizeof *idx) == 0 &&
         memcmp(j->draws, draws, (size_t)n * sizeof *draws) == 0;
}

int dp_image_set_prefetch(dp_image_set *s, const int64_t *idx, int64_t n) {
  if (check_indices(s, idx, n, "prefetch") || same_process(s)) return -1;
  if (s->nworkers == 0 || n == 0) return 0; /* nobody to work in the background */
  uint32_t *draws = dp_xmalloc((size_t)n * sizeof *draws);
  pthread_mutex_lock(&s->mu);
  reap(s, false);
  assign_draws(s, idx, n, s->nq, false, draws);
  for (int q = 0; q < s->nq; q++)
    if (job_matches(s->queue[q], idx, draws, n)) { /* the same prefetch again */
      pthread_mutex_unlock(&s->mu);
      free(draws);
      return 0;
    }
  if (s->nq == DP_IMAGE_MAX_PREFETCH) {
    /* the oldest goes; the draws assumed it would be loaded first, which
     * can now make this job miss, never return a wrong batch */
    drop_queued(s, 0);
    s->stats.discarded++;
  }
  pthread_mutex_unlock(&s->mu);
  job *j = job_new(s, idx, draws, n); /* allocates the batch off the lock */
  free(draws);
  if (!j) return -1;
  pthread_mutex_lock(&s->mu);
  s->queue[s->nq++] = j;
  pthread_cond_broadcast(&s->work);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

int dp_image_set_get_batch(dp_image_set *s, const int64_t *idx, int64_t n, dp_tensor **x, dp_tensor **y) {
  *x = *y = NULL;
  if (check_indices(s, idx, n, "get_batch") || same_process(s)) return -1;
  uint32_t *draws = dp_xmalloc((size_t)(n ? n : 1) * sizeof *draws);
  pthread_mutex_lock(&s->mu);
  reap(s, false);
  assign_draws(s, idx, n, 0, true, draws);
  job *j = NULL;
  for (int q = 0; q < s->nq && !j; q++) {
    if (!job_matches(s->queue[q], idx, draws, n)) continue;
    j = s->queue[q];
    s->queue[q] = NULL;
    memmove(s->queue + q, s->queue + q + 1, (size_t)(s->nq - q - 1) * sizeof *s->queue);
    s->nq--;
    /* prefetches older than the one used were skipped by the caller */
    while (q-- > 0) {
      drop_queued(s, 0);
      s->stats.discarded++;
    }
  }
  if (j) s->stats.hits++;
  else s->stats.misses++;
  pthread_mutex_unlock(&s->mu);
  if (!j) {
    j = job_new(s, idx, draws, n);
    if (!j) {
      free(draws);
      return -1;
    }
  }
  free(draws);
  pthread_mutex_lock(&s->mu);
  s->urgent = j;
  pthread_cond_broadcast(&s->work);
  /* the calling thread decodes too, then waits for the workers' items */
  for (;;) {
    if (j->next < j->n && !s->hold) {
      int64_t pos = j->next++;
      j->active++;
      run_claimed(s, j, pos, &s->own);
    } else if (j->finished < j->n) {
      pthread_cond_wait(&s->done, &s->mu);
    } else {
      break;
    }
  }
  s->urgent = NULL;
  pthread_mutex_unlock(&s->mu);

  for (int64_t p = 0; p < n; p++)
    if (j->err[p]) {
      dp_error("%s", j->err[p]);
      job_free(j);
      return -1;
    }
  dp_tensor *labels = dp_empty(DP_I64, 1, &n, dp_cpu());
  if (!labels) {
    job_free(j);
    return -1;
  }
  int64_t *lp = dp_data(labels);
  for (int64_t p = 0; p < n; p++) lp[p] = s->labels[idx[p]] + 1;
  *x = j->x;
  j->x = NULL;
  *y = labels;
  job_free(j);
  return 0;
}

int dp_image_set_get_item(dp_image_set *s, int64_t i, dp_tensor **x, int64_t *label) {
  *x = NULL;
  if (i < 0 || i >= s->n) return dp_error("get: index %lld is out of range 1..%lld", (long long)i + 1, (long long)s->n);
  dp_image img;
  if (dp_image_read(s->paths[i], s->channels, &img)) {
    char *m = item_error(s, i, dp_errmsg());
    dp_error("%s", m);
    free(m);
    return -1;
  }
  int64_t shape[3] = {s->channels, 0, 0};
  int oh, ow;
  dp_img_output_size(&s->pipe, img.height, img.width, &oh, &ow);
  shape[1] = oh, shape[2] = ow;
  dp_tensor *t = dp_empty(DP_F32, 3, shape, dp_cpu());
  if (!t) {
    dp_image_free(&img);
    return -1;
  }
  uint32_t draw = s->count[i]++;
  dp_img_rng rng = dp_img_rng_for(s->seed, s->epoch, draw, (uint64_t)(s->rows[i] - 1));
  dp_img_apply(&s->pipe, &img, rng, &s->own, dp_data(t));
  dp_image_free(&img);
  *x = t;
  *label = s->labels[i] + 1;
  return 0;
}
