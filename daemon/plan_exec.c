/* daemon/plan_exec.c — how a job's merge policy shapes what the coordinator issues (see
 * plan_exec.h). The leader fuses greedily by the bytes each tensor announced at registration
 * (coord_tensor_meta.bytes, taken from the first rank that registered it, so every rank receives
 * the same groups); a tensor announcing more than the cap is never fused. */
#include "plan_exec.h"

#include <string.h>

#include "daemon.h"

#define SRV_UNFUSED (1ull << 62) /* above any cap, and total + bytes cannot wrap in the leader */

uint64_t srv_policy_group_bytes(const srv_job *j, const srv_tensor *t) {
  /* Compressed tensors keep their own compressor instance and travel alone. */
  if (strcmp(j->policy, "fusion") != 0 || t->comp) return SRV_UNFUSED;
  return t->count * t->esize;
}
