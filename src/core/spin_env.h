/* DDPLUA_SPIN_US: how long a waiting thread spins before it sleeps, in
 * microseconds, for every spin-then-sleep wait in the runtime: a rank
 * waiting on shared memory for its peers (distributed/shm.c, default 20 us)
 * and the CPU pool's workers and caller between parallel calls
 * (backends/cpu/sgemm_pool.c, default 50 us). 0 never spins. Each wait keeps
 * its own default when the variable is unset; a value that is not a whole
 * number of microseconds from 0 to 1000000 counts as unset. Read once per
 * caller; header-only, so neither layer links the other. */
#ifndef DP_SPIN_ENV_H
#define DP_SPIN_ENV_H

#include <stdlib.h>

static inline int dp_spin_us_env(int dflt) {
  const char *v = getenv("DDPLUA_SPIN_US");
  if (!v || !*v) return dflt;
  long x = 0;
  for (const char *c = v; *c; c++) {
    if (*c < '0' || *c > '9') return dflt;
    x = x * 10 + (*c - '0');
    if (x > 1000000) return dflt;
  }
  return (int)x;
}

#endif
