/* A scope for temporaries: DP_SCOPE(s); declares one that releases every
 * tensor added to it when the enclosing block is left, by any return (the
 * compiler's cleanup attribute), so an op's ownership is visible where a
 * temporary is made and its error paths need no cleanup code:
 *
 *   DP_SCOPE(s);
 *   dp_tensor *xc = dp_scope_add(&s, dp_contiguous_raw(x));   (NULL passes through)
 *   dp_tensor *out = dp_scope_add(&s, dp_empty_like(xc));
 *   if (!out || backend(...)) return NULL;                    (s releases both)
 *   return dp_scope_keep(&s, out);                            (out leaves the scope)
 *
 * A scope holds DP_SCOPE_MAX tensors: a loop opens one per iteration. Past
 * that, dp_scope_add releases t and returns NULL with an internal error
 * (the op then fails as on any other error: no abort is reachable). */
#ifndef DP_SCOPE_H
#define DP_SCOPE_H

#include "core/error.h"
#include "tensor/tensor.h"

#define DP_SCOPE_MAX 24
typedef struct {
  int n;
  dp_tensor *t[DP_SCOPE_MAX];
} dp_scope;

static inline void dp_scope_end(dp_scope *s) {
  for (int k = s->n - 1; k >= 0; k--) dp_release(s->t[k]);
  s->n = 0;
}
/* only n needs a value: the slots above it are never read */
#define DP_SCOPE(name)                                                                                                 \
  dp_scope name __attribute__((cleanup(dp_scope_end)));                                                                \
  name.n = 0
/* Hands t (NULL allowed) to the scope; returns t. */
static inline dp_tensor *dp_scope_add(dp_scope *s, dp_tensor *t) {
  if (t) {
    if (s->n >= DP_SCOPE_MAX) {
      dp_release(t);
      dp_error("internal error: more than %d temporaries in one scope", DP_SCOPE_MAX);
      return NULL;
    }
    s->t[s->n++] = t;
  }
  return t;
}
/* Takes t (NULL allowed) back from the scope for the caller; returns t. */
static inline dp_tensor *dp_scope_keep(dp_scope *s, dp_tensor *t) {
  for (int k = s->n - 1; t && k >= 0; k--)
    if (s->t[k] == t) {
      s->t[k] = s->t[--s->n];
      break;
    }
  return t;
}

#endif
