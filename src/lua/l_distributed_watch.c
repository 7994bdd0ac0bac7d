/* The default process group across the runs of `ddplua --watch`
 * (l_rerun.h, l_distributed.h).
 *
 * Creating a group costs a rendezvous, shared-memory segments, TCP meshes
 * and, with NCCL, communicators (seconds). Under --watch the ranks rerun
 * the script in the same processes, so destroy_process_group() of the
 * default group keeps it, and the next init_process_group adopts it — but
 * only if every rank can: a run that failed on one rank aborted its groups,
 * a rank the host restarted has none, a script may now ask for another
 * backend, timeout or debug mode, and ranks that issued different numbers
 * of collectives would pair the wrong ones. So at each init every rank
 * publishes, under watch/<run>.<init>/<rank> in the store, whether its kept
 * group matches the request and how many collectives it issued; the group
 * is adopted when all say yes with the same count, else every rank drops it
 * and a new one is made. The last rank to read the votes deletes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua/l_distributed.h"
#include "lua/l_rerun.h"

void lt_dist_watch_begin(int run) {
  lt_dist.watch = true;
  lt_dist.watch_run = run;
  lt_dist.watch_inits = 0;
}

void lt_dist_watch_stash(void) {
  if (!lt_dist.world) return;
  lt_dist.kept = lt_dist.world;
  lt_dist.world = NULL;
}

static void drop_kept(void) {
  lgroup *k = lt_dist.kept;
  if (!k) return;
  lt_dist.kept = NULL;
  lt_dist_goodbye(k);
  lt_dist_group_destroy(k);
}

void lt_dist_watch_end(bool ok, const char *why) {
  if (!ok)
    for (lgroup *g = lt_dist.groups; g; g = g->next)
      if (g->pg && g->pg->ops->abort) g->pg->ops->abort(g->pg, why);
  lt_dist_watch_stash();
  /* the run's own groups (new_group): every rank is done with them */
  for (lgroup *g = lt_dist.groups, *next; g; g = next) {
    next = g->next;
    if (g != lt_dist.kept) lt_dist_group_destroy(g);
  }
  lt_dist.last_ok = ok;
}

/* Whether this rank's kept group can serve the request. */
static bool kept_fits(int rank, int size, const char *backend, bool debug, int timeout_ms) {
  const lgroup *k = lt_dist.kept;
  if (!k || !k->pg || k->destroyed || !lt_dist.last_ok) return false;
  if (k->n != size || k->pg->global_rank != rank) return false;
  if (strcmp(backend, "auto") != 0 && strcmp(backend, k->pg->ops->name) != 0) return false;
  return k->pg->debug == debug && k->pg->timeout_ms == timeout_ms;
}

int lt_dist_watch_adopt(int rank, int size, const char *backend, bool debug, int timeout_ms) {
  char base[64], key[96], mine[64];
  snprintf(base, sizeof base, "watch/%d.%d/", lt_dist.watch_run, ++lt_dist.watch_inits);
  bool fits = kept_fits(rank, size, backend, debug, timeout_ms);
  unsigned long long seq = fits ? (unsigned long long)lt_dist.kept->pg->seq : 0;
  snprintf(mine, sizeof mine, "%d %llu", fits, seq);
  snprintf(key, sizeof key, "%s%d", base, rank);
  if (dp_store_set(lt_dist.store, key, mine, strlen(mine))) return -1;
  bool all = true;
  for (int r = 0; r < size; r++) {
    void *v = NULL;
    size_t len;
    snprintf(key, sizeof key, "%s%d", base, r);
    if (dp_store_get(lt_dist.store, key, &v, &len, timeout_ms)) {
      dp_pg_blame(r);
      return dp_error("init_process_group: rank %d of %d never joined within %.1f s", r, size, timeout_ms / 1000.0);
    }
    int theirs = 0;
    unsigned long long their_seq = 0;
    if (sscanf(v, "%d %llu", &theirs, &their_seq) != 2 || !theirs || their_seq != seq) all = false;
    free(v);
  }
  int64_t read = 0;
  snprintf(key, sizeof key, "%sread", base);
  if (dp_store_add(lt_dist.store, key, 1, &read) == 0 && read >= size)
    dp_store_delete_prefix(lt_dist.store, base, NULL);
  if (all && fits) {
    lt_dist.world = lt_dist.kept;
    lt_dist.kept = NULL;
    return 1;
  }
  drop_kept();
  return 0;
}
