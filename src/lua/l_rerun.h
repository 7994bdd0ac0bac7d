/* What the runtime does between the runs of `ddplua --watch` (the worker
 * loop is src/host/rerun.c). A watched worker runs its script many times
 * in one process and one Lua state (fresh globals and modules each time;
 * ddp.keep's values live in the registry); a rerun must give what a cold
 * run gives, so everything a script can change in the C runtime goes back
 * to how the process started, and the default process group is kept only
 * when every rank can go on using it. */
#ifndef DP_L_RERUN_H
#define DP_L_RERUN_H

#include <stdbool.h>

/* l_core.c: the generator, grad mode, autocast, threads and GEMM choice as
 * the process starts (snapshot, once, before the first run) and back to
 * them (reset, before every run). */
void lt_rerun_snapshot(void);
void lt_rerun_reset(void);

/* l_distributed_watch.c. Run `run` (1, 2, ...) begins. */
void lt_dist_watch_begin(int run);
/* The run ended (ok: without an error). The groups it made are destroyed,
 * the default group is kept (hidden: is_initialized() is false until the
 * next init_process_group); after a failure every group is aborted first,
 * so that peers blocked in a collective with this rank fail at once,
 * naming it and `why`. */
void lt_dist_watch_end(bool ok, const char *why);

#endif
