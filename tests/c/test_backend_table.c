/* The backend table check the runtime runs on the CUDA plugin's table
 * before using it (backend.c: dp_backend_check): a table missing a required
 * entry is refused with an error naming the entry; the optional device
 * extras may be missing; the CPU table is complete as a host backend but
 * not as a device one. No GPU needed: the check is tested directly. */
#include <string.h>

#include "backends/backend.h"
#include "core/error.h"
#include "test_util.h"

static int fake_copy(dp_tensor *dst, const dp_tensor *src) {
  (void)dst, (void)src;
  return 0;
}
static int fake_stats(int device, dp_device_mem_stats *out) {
  (void)device, (void)out;
  return 0;
}
static int fake_empty(void) { return 0; }
static int fake_set(const char *name, double v) {
  (void)name, (void)v;
  return 0;
}
static int fake_get(const char *name, double *v) {
  (void)name, (void)v;
  return 0;
}
static const char *fake_name(int device) {
  (void)device;
  return "fake";
}

/* The CPU table with the device entries filled in: what a device plugin's
 * table looks like. */
static dp_backend device_table(void) {
  dp_backend b = dp_cpu_backend;
  b.name = "cuda";
  b.copy_from_cpu = fake_copy;
  b.copy_to_cpu = fake_copy;
  b.memory_stats = fake_stats;
  b.empty_cache = fake_empty;
  b.set_option = fake_set;
  b.get_option = fake_get;
  b.device_name = fake_name;
  return b;
}

int main(void) {
  CHECK(dp_backend_check(&dp_cpu_backend, false) == 0);
  /* the CPU table lacks what a device backend needs */
  CHECK(dp_backend_check(&dp_cpu_backend, true) != 0);
  CHECK(strstr(dp_errmsg(), "'copy_from_cpu'") != NULL);

  dp_backend b = device_table();
  CHECK(b.unscale_list == NULL && b.pg_new == NULL); /* the optional extras are missing */
  CHECK(dp_backend_check(&b, true) == 0);

  /* one required kernel entry missing: refused, naming it */
  b.bn_backward_elemt = NULL;
  CHECK(dp_backend_check(&b, true) != 0);
  CHECK(strstr(dp_errmsg(), "the cuda backend is incomplete: its table has no 'bn_backward_elemt' entry") != NULL);
  CHECK(dp_backend_check(&b, false) != 0); /* required of every backend */

  /* one required device extra missing */
  b = device_table();
  b.device_name = NULL;
  CHECK(dp_backend_check(&b, true) != 0);
  CHECK(strstr(dp_errmsg(), "'device_name'") != NULL);
  CHECK(dp_backend_check(&b, false) == 0); /* a host backend need not have it */

  /* the first and the last entries are covered too */
  b = device_table();
  b.device_count = NULL;
  CHECK(dp_backend_check(&b, true) != 0 && strstr(dp_errmsg(), "'device_count'") != NULL);
  b = device_table();
  b.unscale = NULL;
  CHECK(dp_backend_check(&b, true) != 0 && strstr(dp_errmsg(), "'unscale'") != NULL);
  TEST_DONE();
}
