/* Autocast state (thread-local, like PyTorch's) and the cast hook that
 * matmul / linear / conv2d call at their start. See autocast.h. */
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

/* Float32 CUDA tensors are cast; everything else keeps its dtype. */
static bool wants_cast(const dp_tensor *t) { return t->dtype == DP_F32; }

int dp_autocast_cast(dp_autocast_scope *sc, int n, dp_tensor **args[]) {
  sc->n = 0;
  if (!state.enabled) return 0;
  DP_ASSERT(n <= DP_AUTOCAST_MAX_ARGS);
  int present = 0;
  for (int i = 0; i < n; i++) {
    dp_tensor *t = *args[i];
    if (!t) continue;
    if (dp_dev(t).type != DP_CUDA) return 0; /* CPU (or mixed: the op reports it) */
    present++;
  }
  if (!present) return 0;
  for (int i = 0; i < n; i++) {
    dp_tensor *t = *args[i];
    if (!t || !wants_cast(t)) continue;
    dp_tensor *c = dp_to(t, state.dtype, dp_dev(t));
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

dp_tensor *dp_autocast_done(dp_autocast_scope *sc, dp_tensor *out) {
  for (int i = 0; i < sc->n; i++) dp_release(sc->held[i]);
  sc->n = 0;
  return out;
}
