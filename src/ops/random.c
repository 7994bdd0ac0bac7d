/* The global Philox generator: a seed and a counter offset. Each draw of n
 * numbers reserves counters [offset, offset + n), so the numbers depend only
 * on the seed and the order of draws, never on the device or threads. */
#include <stdatomic.h>

#include "ops/op_util.h"
#include "ops/philox.h"

static uint64_t rng_seed = 67280421310721ull; /* PyTorch's default seed */
static _Atomic uint64_t rng_offset;

void dp_manual_seed(uint64_t seed) {
  rng_seed = seed;
  atomic_store(&rng_offset, 0);
}
uint64_t dp_rng_seed(void) { return rng_seed; }
uint64_t dp_rng_reserve(uint64_t n) { return atomic_fetch_add(&rng_offset, n); }
void dp_rng_get_state(uint64_t *seed, uint64_t *offset) {
  *seed = rng_seed;
  *offset = atomic_load(&rng_offset);
}
void dp_rng_set_state(uint64_t seed, uint64_t offset) {
  rng_seed = seed;
  atomic_store(&rng_offset, offset);
}

static dp_tensor *draw(dp_rand_kind kind, dp_dtype dt, int ndim, const int64_t *shape, dp_device dev, double a,
                       double b) {
  if (!dp_dtype_is_float(dt)) {
    dp_error("%s: expected a floating point dtype, got %s", kind == DP_RAND_UNIFORM ? "rand" : "randn",
             dp_dtype_name(dt));
    return NULL;
  }
  DP_SCOPE(s);
  dp_tensor *t = dp_scope_add(&s, dp_empty(dt, ndim, shape, dev));
  if (!t) return NULL;
  uint64_t off = dp_rng_reserve((uint64_t)dp_numel(t));
  if (dp_backend_of(t)->rand(t, kind, rng_seed, off, a, b)) return NULL;
  return dp_scope_keep(&s, t);
}

/* Draws into t itself (contiguous, floating point): the numbers dp_rand /
 * dp_randn would have made for t's shape at this point of the generator,
 * without a tensor of its own (nn.init's uniform_ / normal_ of a fresh
 * weight: on a VM each page of a new block costs a fault). */
int dp_rand_(dp_tensor *t, bool normal) {
  const char *name = normal ? "normal_" : "uniform_";
  if (!dp_dtype_is_float(t->dtype))
    return dp_error("%s: expected a floating point tensor, got %s", name, dp_dtype_name(t->dtype));
  if (!dp_is_contiguous(t)) return dp_error("%s: the tensor must be contiguous", name);
  uint64_t off = dp_rng_reserve((uint64_t)dp_numel(t));
  if (dp_backend_of(t)->rand(t, normal ? DP_RAND_NORMAL : DP_RAND_UNIFORM, rng_seed, off, 0.0, 1.0)) return -1;
  dp_bump_version(t);
  return 0;
}

dp_tensor *dp_rand(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev) {
  return draw(DP_RAND_UNIFORM, dt, ndim, shape, dev, 0.0, 1.0);
}

dp_tensor *dp_randn(dp_dtype dt, int ndim, const int64_t *shape, dp_device dev) {
  return draw(DP_RAND_NORMAL, dt, ndim, shape, dev, 0.0, 1.0);
}

dp_tensor *dp_randperm(int64_t n, int64_t base) {
  uint64_t off = dp_rng_reserve((uint64_t)(n > 0 ? n : 0));
  return dp_randperm_with(n, base, rng_seed, off);
}

dp_tensor *dp_randperm_with(int64_t n, int64_t base, uint64_t seed, uint64_t off) {
  if (n < 0) {
    dp_error("randperm: n must be >= 0, got %" PRId64, n);
    return NULL;
  }
  dp_tensor *t = dp_empty(DP_I64, 1, &n, dp_cpu());
  if (!t) return NULL;
  int64_t *p = dp_data(t);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  /* Fisher-Yates; one counter per swap */
  for (int64_t i = n - 1; i > 0; i--) {
    dp_philox4 r = dp_philox(seed, off + (uint64_t)i);
    uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
    int64_t j = (int64_t)(x % (uint64_t)(i + 1));
    int64_t tmp = p[i];
    p[i] = p[j];
    p[j] = tmp;
  }
  if (base)
    for (int64_t i = 0; i < n; i++) p[i] += base;
  return t;
}
