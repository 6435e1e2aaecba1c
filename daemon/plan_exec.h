/* daemon/plan_exec.h — merge policies in fgbuffd. The dynamic ones run through the coordinator:
 * "none" issues every tensor alone, "fusion" lets the leader fuse the dense tensors that become
 * ready together into one ISSUE (one merge buffer in the engine) up to SRV_FUSION_BYTES. Static
 * policies (plans) are not wired yet: joining with one is FGB_ENOTSUP. */
#ifndef FGB_SRV_PLAN_EXEC_H
#define FGB_SRV_PLAN_EXEC_H

#include <stddef.h>
#include <stdint.h>

/* The leader's fusion cap (coord_config.fusion_bytes): the fusion policy's default threshold. */
#define SRV_FUSION_BYTES (128u << 20)

struct srv_job;
struct srv_tensor;

/* The bytes a tensor announces to the coordinator for grouping: its dense bytes in a "fusion" job
 * (dense tensors only), else a size above any cap, so it travels alone. */
uint64_t srv_policy_group_bytes(const struct srv_job *j, const struct srv_tensor *t);

#endif
