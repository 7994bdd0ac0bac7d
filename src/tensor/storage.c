#include "tensor/storage.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "core/error.h"

static atomic_size_t alloc_counter;

size_t dp_alloc_counter_take(void) { return atomic_exchange(&alloc_counter, 0); }

static void release_device(dp_storage *s) {
  if (s->device.type == DP_CPU) {
    dp_cpu_free(s->data, s->nbytes);
  } else {
    const dp_backend *b = dp_backend_get(s->device.type);
    if (b && b->free) b->free(s->device.index, s->data, s->nbytes);
  }
}

dp_storage *dp_storage_new(size_t nbytes, dp_device dev) {
  void *data;
  if (dev.type == DP_CPU) {
    data = dp_cpu_alloc(nbytes);
    if (!data) {
      dp_error("out of memory: could not allocate %zu bytes on cpu", nbytes);
      return NULL;
    }
  } else {
    const dp_backend *b = dp_backend_require(dev.type);
    if (!b) return NULL;
    data = b->alloc(dev.index, nbytes);
    if (!data) return NULL; /* backend set the message */
  }
  atomic_fetch_add(&alloc_counter, nbytes);
  dp_storage *s = dp_xcalloc(1, sizeof *s);
  s->refcount = 1;
  s->version = 0;
  s->data = data;
  s->nbytes = nbytes;
  s->device = dev;
  s->release = NULL;
  return s;
}

dp_storage *dp_storage_wrap(void *data, size_t nbytes, dp_device dev, void (*release)(dp_storage *), void *ctx) {
  dp_storage *s = dp_xcalloc(1, sizeof *s);
  s->refcount = 1;
  s->version = 0;
  s->data = data;
  s->nbytes = nbytes;
  s->device = dev;
  s->release = release;
  s->ctx = ctx;
  return s;
}

void dp_storage_retain(dp_storage *s) { __atomic_fetch_add(&s->refcount, 1, __ATOMIC_RELAXED); }

void dp_storage_release(dp_storage *s) {
  if (!s) return;
  if (__atomic_fetch_sub(&s->refcount, 1, __ATOMIC_ACQ_REL) != 1) return;
  if (s->release) s->release(s);
  else release_device(s);
  free(s);
}
