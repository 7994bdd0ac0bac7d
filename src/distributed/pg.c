/* What every process-group backend shares (pg.h): the culprit a failure
 * is blamed on, and a group's lifetime when C code holds it. */
#include <stdatomic.h>

#include "distributed/pg.h"

static _Atomic int culprit = -1;

int dp_pg_culprit(void) { return atomic_load(&culprit); }

void dp_pg_blame(int global_rank) {
  int none = -1;
  if (global_rank >= 0) atomic_compare_exchange_strong(&culprit, &none, global_rank);
}

void dp_pg_hold(dp_pg *g) { atomic_fetch_add(&g->holds, 1); }

void dp_pg_unhold(dp_pg *g) {
  if (atomic_fetch_sub(&g->holds, 1) == 1 && atomic_load(&g->retired)) g->ops->destroy(g);
}

void dp_pg_retire(dp_pg *g) {
  if (g->ops->shutdown) g->ops->shutdown(g);
  atomic_store(&g->retired, true);
  if (atomic_load(&g->holds) == 0) g->ops->destroy(g);
}
