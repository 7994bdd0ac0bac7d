/* backend "auto"'s seats (distributed/auto_seat.h): the seat string from
 * the boot id and CUDA_VISIBLE_DEVICES, and the clash check over seats that
 * arrive from other processes through the store, hostile ones included
 * (no '/', empty, missing), which must be compared and named without
 * reading out of bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/auto_seat.h"
#include "test_util.h"

static void seats(void) {
  char boot[64] = "?";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "?");
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = 0;
  char want[128], got[128];
  unsetenv("CUDA_VISIBLE_DEVICES");
  dp_auto_seat(3, got, sizeof got);
  snprintf(want, sizeof want, "%s/3", boot);
  CHECK(strcmp(got, want) == 0);
  setenv("CUDA_VISIBLE_DEVICES", "4,GPU-77ab,1", 1);
  dp_auto_seat(1, got, sizeof got);
  snprintf(want, sizeof want, "%s/GPU-77ab", boot);
  CHECK(strcmp(got, want) == 0);
  dp_auto_seat(2, got, sizeof got);
  snprintf(want, sizeof want, "%s/1", boot);
  CHECK(strcmp(got, want) == 0);
  dp_auto_seat(7, got, sizeof got); /* past the list: the index */
  snprintf(want, sizeof want, "%s/7", boot);
  CHECK(strcmp(got, want) == 0);
  dp_auto_seat(0, got, 8); /* a short buffer is cut, terminated */
  CHECK(strlen(got) == 7);
  unsetenv("CUDA_VISIBLE_DEVICES");
}

static void clashes(void) {
  char msg[320];
  const char *apart[] = {"b1/0", "b1/1", "b2/0", "b2/1"};
  CHECK(!dp_auto_seats_clash(apart, 4, msg, sizeof msg) && msg[0] == 0);
  CHECK(!dp_auto_seats_clash(apart, 1, msg, sizeof msg));
  CHECK(!dp_auto_seats_clash(apart, 0, msg, sizeof msg));
  const char *two_nodes[] = {"b1/1", "b1/0", "b2/0", "b1/0", "b1/1"}; /* ranks 0, 4 and 1, 3 share */
  CHECK(dp_auto_seats_clash(two_nodes, 5, msg, sizeof msg));
  CHECK(strstr(msg, "ranks 0 and 4 would both use GPU 1 of one machine (boot id b1)") != NULL);
  const char *hostile[] = {"", "no-slash", "", "/", "x/"};
  CHECK(dp_auto_seats_clash(hostile, 5, msg, sizeof msg));
  CHECK(strstr(msg, "ranks 0 and 2 would both use the same GPU ()") != NULL);
  const char *slashless[] = {"same", "other", "same"};
  CHECK(dp_auto_seats_clash(slashless, 3, msg, sizeof msg));
  CHECK(strstr(msg, "ranks 0 and 2 would both use the same GPU (same)") != NULL);
  const char *missing[] = {NULL, "a/0", NULL};
  CHECK(dp_auto_seats_clash(missing, 3, msg, sizeof msg));
  CHECK(strstr(msg, "ranks 0 and 2") != NULL);
  char longer[2048];
  memset(longer, 'z', sizeof longer - 1);
  longer[sizeof longer - 1] = 0;
  const char *huge[] = {longer, longer};
  CHECK(dp_auto_seats_clash(huge, 2, msg, sizeof msg) && strlen(msg) < sizeof msg);
  /* many ranks, one clash at the end */
  enum { N = 5000 };
  static char buf[N][32];
  const char *many[N];
  for (int r = 0; r < N; r++) {
    snprintf(buf[r], sizeof buf[r], "host%d/0", r);
    many[r] = buf[r];
  }
  CHECK(!dp_auto_seats_clash(many, N, msg, sizeof msg));
  many[N - 1] = buf[17];
  CHECK(dp_auto_seats_clash(many, N, msg, sizeof msg));
  CHECK(strstr(msg, "ranks 17 and 4999") != NULL);
}

int main(void) {
  seats();
  clashes();
  TEST_DONE();
}
