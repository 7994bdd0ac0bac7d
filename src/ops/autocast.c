/* Autocast state (thread-local, like PyTorch's) and the cast hooks the ops
 * call at their start (autocast.h). */
#include "ops/autocast.h"

#include "core/error.h"
#include "ops/ops.h"

static _Thread_local dp_autocast_state state = {false, DP_BF16};

dp_autocast_state dp_autocast_get(void) { return state; }

int dp_autocast_set(dp_autocast_state s, dp_autocast_state *prev) {
  if (s.enabled && s.dtype != DP_BF16 && s.dtype != DP_F16)
    return dp_error("autocast: dtype must be bfloat16 or float16, got %s", dp_dtype_name(s.dtype));
  if (prev) *prev = state;
  state = s;
  return 0;
}

/* Replaces each non-NULL *args[i] that wants(t) by its cast to dtype. */
static int cast_each(dp_autocast_scope *sc, int n, dp_tensor **args[], bool (*wants)(const dp_tensor *), dp_dtype to) {
  for (int i = 0; i < n; i++) {
    dp_tensor *t = *args[i];
    if (!t || !wants(t)) continue;
    dp_tensor *c = dp_to(t, to, dp_dev(t));
    if (!c) {
      dp_error_prefix("autocast: ");
      dp_autocast_done(sc, NULL);
      return -1;
    }
    sc->held[sc->n++] = c;
    *args[i] = c;
  }
  return 0;
}

static bool is_f32(const dp_tensor *t) { return t->dtype == DP_F32; }
static bool is_half(const dp_tensor *t) { return t->dtype == DP_BF16 || t->dtype == DP_F16; }

int dp_autocast_cast(dp_autocast_scope *sc, int n, dp_tensor **args[]) {
  sc->n = 0;
  if (!state.enabled) return 0;
  DP_ASSERT(n <= DP_AUTOCAST_MAX_ARGS);
  int present = 0, cuda = 0;
  for (int i = 0; i < n; i++) {
    dp_tensor *t = *args[i];
    if (!t) continue;
    present++;
    cuda += dp_dev(t).type == DP_CUDA;
  }
  if (!present) return 0;
  /* one device for all (mixed: the op reports it); the CPU computes
   * bfloat16 only, as PyTorch's CPU autocast */
  if (cuda != present && (cuda || state.dtype != DP_BF16)) return 0;
  return cast_each(sc, n, args, is_f32, state.dtype);
}

int dp_autocast_fp32(dp_autocast_scope *sc, int n, dp_tensor **args[]) {
  sc->n = 0;
  if (!state.enabled) return 0;
  DP_ASSERT(n <= DP_AUTOCAST_MAX_ARGS);
  return cast_each(sc, n, args, is_half, DP_F32);
}

dp_tensor *dp_autocast_done(dp_autocast_scope *sc, dp_tensor *out) {
  for (int i = 0; i < sc->n; i++) dp_release(sc->held[i]);
  sc->n = 0;
  return out;
}
