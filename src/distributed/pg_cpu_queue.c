/* The communication thread of a cpu group and its work handles.
 *
 * Async ops go into a FIFO that one thread per group (started by the first
 * async op) executes in issue order. A synchronous op first waits until the
 * queue is empty and the thread idle, then runs on the caller's thread, so
 * ops still execute in issue order and the common synchronous case costs no
 * thread hand-off. Staged device copies are made and copied back on the
 * caller's thread (in wait), never on the communication thread. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_fpu.h"
#include "core/error.h"
#include "distributed/pg_cpu.h"

struct cpu_work {
  dp_work base;
  cpu_pg *g;
  cpu_op op;
  atomic_int refs;  /* the user's handle + the queue's */
  atomic_bool done; /* set under q_mu; read without it once true */
  bool finished;
  int rc;
  char err[512];
  cpu_work *next;
};

static void work_unref(cpu_work *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  cpu_op_finish(&w->op, -1); /* releases what is left */
  free(w);
}

static int work_wait(dp_work *base) {
  cpu_work *w = (cpu_work *)base;
  cpu_pg *g = w->g;
  if (!atomic_load(&w->done)) { /* (once done, the group may already be destroyed) */
    pthread_mutex_lock(&g->q_mu);
    while (!atomic_load(&w->done)) pthread_cond_wait(&g->idle_cv, &g->q_mu);
    pthread_mutex_unlock(&g->q_mu);
  }
  if (!w->finished) {
    w->finished = true;
    int rc = cpu_op_finish(&w->op, w->rc);
    if (w->rc == 0 && rc) {
      w->rc = rc;
      snprintf(w->err, sizeof w->err, "%s", dp_errmsg());
    }
  }
  if (w->rc) return dp_error("%s", w->err);
  return 0;
}

static bool work_is_completed(dp_work *base) { return atomic_load(&((cpu_work *)base)->done); }

static void work_release(dp_work *base) {
  cpu_work *w = (cpu_work *)base;
  /* device originals belong to the caller's thread: drop them here; the
   * host buffers go when the communication thread is done with them */
  if (!w->finished) {
    dp_clear(&w->op.dev_t);
    dp_clear(&w->op.dev_out);
  }
  work_unref(w);
}

static void *comm_main(void *arg) {
  cpu_pg *g = arg;
  pthread_mutex_lock(&g->q_mu);
  for (;;) {
    while (!g->q_head && !g->stopping) pthread_cond_wait(&g->q_cv, &g->q_mu);
    if (!g->q_head) break;
    cpu_work *w = g->q_head;
    g->q_head = w->next;
    if (!g->q_head) g->q_tail = NULL;
    g->busy = true;
    pthread_mutex_unlock(&g->q_mu);
    dp_fpu_sync(); /* reductions flush denormals as the caller's thread does */
    int rc = cpu_exec(g, &w->op);
    pthread_mutex_lock(&g->q_mu);
    w->rc = rc;
    if (rc) snprintf(w->err, sizeof w->err, "%s", dp_errmsg());
    atomic_store(&w->done, true);
    g->busy = false;
    pthread_cond_broadcast(&g->idle_cv);
    pthread_mutex_unlock(&g->q_mu);
    work_unref(w);
    pthread_mutex_lock(&g->q_mu);
  }
  pthread_mutex_unlock(&g->q_mu);
  return NULL;
}

static int start_thread(cpu_pg *g) {
  /* signals (Ctrl-C, SIGCHLD) stay with the main thread */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = pthread_create(&g->thread, NULL, comm_main, g);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (e) return dp_error("cannot start the process group's communication thread: %s", strerror(e));
  g->thread_started = true;
  return 0;
}

int cpu_submit(cpu_pg *g, cpu_op *op, dp_work **work) {
  if (!work) {
    if (g->thread_started) {
      pthread_mutex_lock(&g->q_mu);
      while (g->q_head || g->busy) pthread_cond_wait(&g->idle_cv, &g->q_mu);
      pthread_mutex_unlock(&g->q_mu);
    }
    int rc = cpu_exec(g, op);
    return cpu_op_finish(op, rc) ? -1 : rc;
  }
  if (!g->thread_started && start_thread(g)) return cpu_op_finish(op, -1);
  cpu_work *w = dp_xcalloc(1, sizeof *w);
  w->base.wait = work_wait;
  w->base.is_completed = work_is_completed;
  w->base.release = work_release;
  w->g = g;
  w->op = *op;
  atomic_init(&w->refs, 2);
  pthread_mutex_lock(&g->q_mu);
  if (g->q_tail) g->q_tail->next = w;
  else g->q_head = w;
  g->q_tail = w;
  pthread_cond_signal(&g->q_cv);
  pthread_mutex_unlock(&g->q_mu);
  *work = &w->base;
  return 0;
}

void cpu_queue_stop(cpu_pg *g) {
  if (!g->thread_started) return;
  pthread_mutex_lock(&g->q_mu);
  g->stopping = true;
  pthread_cond_signal(&g->q_cv);
  pthread_mutex_unlock(&g->q_mu);
  pthread_join(g->thread, NULL);
  g->thread_started = false;
}
