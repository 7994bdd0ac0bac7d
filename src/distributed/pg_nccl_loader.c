/* The runtime's door to the NCCL process group, which lives in the CUDA
 * plugin (src/backends/cuda/nccl_group.c) because it needs the CUDA and NCCL
 * libraries: load the plugin on first use and ask it for a group. */
#include "backends/backend.h"
#include "core/error.h"
#include "distributed/pg.h"

dp_pg *dp_pg_nccl_new(const dp_pg_init *init) {
  const dp_backend *b = dp_backend_require(DP_CUDA);
  if (!b) {
    dp_error_prefix("the nccl process group needs CUDA: ");
    return NULL;
  }
  if (!b->pg_new) {
    dp_error("the CUDA plugin was built without NCCL: use backend=\"cpu\"");
    return NULL;
  }
  return b->pg_new(init);
}
