/* Seats for backend "auto" (see auto_seat.h). Two "nodes" started on one
 * machine (two `ddplua --nnodes 2` on one host) each see a GPU per local
 * rank and would each take GPU 0; NCCL refuses two ranks on one GPU
 * ("Duplicate GPU detected"), so equal seats make the group cpu. */
#include "distributed/auto_seat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void dp_auto_seat(int local_rank, char *buf, size_t n) {
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = 0;
  char dev[64];
  snprintf(dev, sizeof dev, "%d", local_rank);
  const char *p = getenv("CUDA_VISIBLE_DEVICES");
  for (int i = 0; p && *p && i < local_rank; i++)
    if ((p = strchr(p, ','))) p++;
  if (p && *p) snprintf(dev, sizeof dev, "%.*s", (int)strcspn(p, ","), p);
  snprintf(buf, n, "%s/%s", boot[0] ? boot : "?", dev);
}

typedef struct {
  const char *seat;
  int rank;
} ranked_seat;

static int by_seat_then_rank(const void *a, const void *b) {
  const ranked_seat *x = a, *y = b;
  int c = strcmp(x->seat, y->seat);
  return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

/* Sorted, so a job of thousands of ranks compares n log n pairs, not n^2. */
bool dp_auto_seats_clash(const char *const *seats, int n, char *msg, size_t msg_n) {
  if (msg_n) msg[0] = 0;
  if (n < 2) return false;
  ranked_seat *s = dp_xmalloc(sizeof *s * (size_t)n);
  for (int r = 0; r < n; r++) s[r] = (ranked_seat){seats[r] ? seats[r] : "", r};
  qsort(s, (size_t)n, sizeof *s, by_seat_then_rank);
  int a = -1, b = -1;
  const char *seat = NULL;
  for (int i = 0; i + 1 < n; i++)
    if (strcmp(s[i].seat, s[i + 1].seat) == 0 && (a < 0 || s[i].rank < a)) {
      a = s[i].rank, b = s[i + 1].rank, seat = s[i].seat;
    }
  free(s);
  if (a < 0) return false;
  const char *slash = strrchr(seat, '/');
  if (slash)
    snprintf(msg, msg_n,
             "ddplua: backend auto: ranks %d and %d would both use GPU %.60s of one machine (boot id %.*s), and "
             "nccl needs one per rank: using the cpu group",
             a, b, slash + 1, (int)(slash - seat < 64 ? slash - seat : 64), seat);
  else
    snprintf(msg, msg_n,
             "ddplua: backend auto: ranks %d and %d would both use the same GPU (%.60s), and nccl needs one per "
             "rank: using the cpu group",
             a, b, seat);
  return true;
}
