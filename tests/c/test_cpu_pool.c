/* The CPU worker pool (src/backends/cpu/sgemm_pool.c): every part of every
 * call runs exactly once and the call returns only after all of them,
 * whether the workers are still spinning from the last call (calls back to
 * back), asleep (calls further apart than the spin), slower than the caller
 * (the caller sleeps) or absent (a forked child; a process allowed one CPU,
 * where nobody spins); nested calls run serially on the calling thread.
 * DDPLUA_SPIN_US sets the spin (core/spin_env.h): 0 parks the workers at
 * once, 1 s keeps one busy through a pause of the caller. */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/sgemm_kernels.h"
#include "core/spin_env.h"
#include "test_util.h"

enum { MAX_PARTS = 8 };

typedef struct {
  int ran[MAX_PARTS]; /* atomic */
  int64_t sleep_ns[MAX_PARTS];
  int nested_parts;
  int nested_ran;       /* atomic */
  int in_parallel_seen; /* atomic */
} job;

static void sleep_ns(int64_t ns) {
  struct timespec t = {ns / 1000000000, ns % 1000000000};
  nanosleep(&t, NULL);
}

static void nested_part(void *ctx, int part) {
  (void)part;
  __atomic_add_fetch(&((job *)ctx)->nested_ran, 1, __ATOMIC_RELAXED);
}

static void part_fn(void *ctx, int part) {
  job *j = ctx;
  if (j->sleep_ns[part]) sleep_ns(j->sleep_ns[part]);
  if (dp_sg_in_parallel()) __atomic_add_fetch(&j->in_parallel_seen, 1, __ATOMIC_RELAXED);
  if (j->nested_parts) dp_sg_parallel(j->nested_parts, nested_part, j);
  __atomic_add_fetch(&j->ran[part], 1, __ATOMIC_RELAXED);
}

/* `calls` calls of `parts` parts, `gap_ns` apart; false on the first call
 * where a part did not run exactly once by the time the call returned. */
static int run_calls(int calls, int parts, int64_t gap_ns, int64_t slow_part_ns) {
  for (int c = 0; c < calls; c++) {
    job j;
    memset(&j, 0, sizeof j);
    if (slow_part_ns) j.sleep_ns[parts - 1] = slow_part_ns;
    dp_sg_parallel(parts, part_fn, &j);
    for (int p = 0; p < parts; p++)
      if (j.ran[p] != 1) {
        fprintf(stderr, "call %d of %d parts: part %d ran %d times\n", c, parts, p, j.ran[p]);
        return 0;
      }
    if (j.in_parallel_seen != parts) return 0;
    if (gap_ns) sleep_ns(gap_ns);
  }
  return 1;
}

static int child_status(void) {
  int st = 0;
  if (wait(&st) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Calls of `parts` parts (the pool starts parts - 1 workers; it spins when the process has a CPU for each). */
static void suite(int parts, int calls) {
  CHECK(!dp_sg_in_parallel());
  /* back to back: the workers are spinning when the next call comes (if they spin) */
  CHECK(run_calls(calls, parts, 0, 0));
  /* further apart than the spin: both sides sleep, and are woken */
  CHECK(run_calls(100, parts, 300000, 0));
  /* a worker slower than the caller: the caller sleeps on `done` */
  CHECK(run_calls(30, parts, 0, 2000000));
  CHECK(run_calls(30, parts, 100000, 1000000));
  /* nested: serially, on the calling thread */
  job n;
  memset(&n, 0, sizeof n);
  n.nested_parts = 3;
  dp_sg_parallel(parts, part_fn, &n);
  for (int p = 0; p < parts; p++) CHECK(n.ran[p] == 1);
  CHECK(n.nested_ran == 3 * parts);
  CHECK(!dp_sg_in_parallel());
}

static void spin_env_parsing(void) {
  const struct {
    const char *v;
    int want;
  } cases[] = {{"", 7},    {"0", 0},   {"20", 20}, {"1000000", 1000000},       {"1000001", 7}, {"-5", 7},
               {"12x", 7}, {"abc", 7}, {" 3", 7},  {"99999999999999999999", 7}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("DDPLUA_SPIN_US", cases[i].v, 1);
    int got = dp_spin_us_env(7);
    if (got != cases[i].want) fprintf(stderr, "DDPLUA_SPIN_US='%s': %d, expected %d\n", cases[i].v, got, cases[i].want);
    CHECK(got == cases[i].want);
  }
  unsetenv("DDPLUA_SPIN_US");
  CHECK(dp_spin_us_env(7) == 7);
}

static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* In a forked child (a pool of its own) with DDPLUA_SPIN_US = spin_us: the CPU time the process uses while its
 * caller sleeps 300 ms right after a 2-part call; exit status 0 when the calls were right, 3 when not. */
static void spin_child(const char *spin_us, double *busy_out) {
  int fd[2];
  CHECK(pipe(fd) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("DDPLUA_SPIN_US", spin_us, 1);
    int ok = run_calls(200, 2, 0, 0);
    double c0 = cpu_seconds();
    sleep_ns(300000000);
    double busy = cpu_seconds() - c0;
    ok = ok && run_calls(200, 2, 0, 0);
    ssize_t w = write(fd[1], &busy, sizeof busy);
    _exit(ok && w == (ssize_t)sizeof busy ? 0 : 3);
  }
  close(fd[1]);
  double busy = -1;
  CHECK(read(fd[0], &busy, sizeof busy) == (ssize_t)sizeof busy);
  close(fd[0]);
  CHECK(pid > 0 && child_status() == 0);
  *busy_out = busy;
}

int main(void) {
  spin_env_parsing();
  {
    cpu_set_t set;
    bool two_cpus = sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 2;
    double parked, spinning;
    spin_child("0", &parked);
    spin_child("1000000", &spinning);
    /* 0: the worker parks at once; 1 s: it spins through the pause (where it has a CPU of its own). The spinning
     * bound is a third of the pause, not half: `make test` runs this beside the specs, and a worker sharing its
     * CPU with them got exactly half (0.150 s, failing a >= 0.15 bound once); parking stays near 0 either way. */
    if (parked > 0.05 || (two_cpus && spinning < 0.1))
      fprintf(stderr, "CPU time during a 300 ms pause: %.3f s (spin 0), %.3f s (spin 1 s)\n", parked, spinning);
    CHECK(parked <= 0.05);
    CHECK(two_cpus ? spinning >= 0.1 : spinning <= 0.1);
  }
  /* 2 parts first (on 2 or more CPUs the worker spins), then more (on 2 CPUs these only sleep: some 80 us a call) */
  suite(2, 20000);
  suite(3, 2000);
  suite(4, 2000);
  suite(MAX_PARTS, 1000);

  /* a forked child has no workers behind its copy of the pool: it starts its own */
  pid_t pid = fork();
  if (pid == 0) _exit(run_calls(2000, 3, 0, 0) && run_calls(20, 2, 200000, 0) ? 0 : 1);
  CHECK(pid > 0 && child_status() == 0);

  /* one CPU allowed and four threads: nobody spins (a spinner would hold the only CPU), calls still complete */
  pid = fork();
  if (pid == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(2);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = run_calls(2000, 4, 0, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* spinning workers on one CPU would cost a scheduler slice per call (seconds in all) */
    if (s > 20) fprintf(stderr, "2000 calls on one CPU took %.1f s\n", s);
    _exit(ok && s <= 20 ? 0 : 1);
  }
  CHECK(pid > 0 && child_status() == 0);
  TEST_DONE();
}
