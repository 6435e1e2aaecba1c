/* daemon/core/limits.c — the daemon's bounds on what its clients may hold (issue 15): jobs per
 * daemon, tensors per job and a job's tensor bytes, from the live settings max_jobs,
 * max_tensors_per_job and max_job_bytes (conf/settings.c). A refusal names the setting and its
 * value; the log gets one line per cause and 10 s, with the count refused so far. */
#include <stdarg.h>
#include <stdio.h>

#include "clock.h"
#include "core_internal.h"
#include "log.h"

#define LIMIT_LOG_MS 10000

enum { CAUSE_JOBS, CAUSE_TENSORS, CAUSE_BYTES };

static void refusal_log(core *d, int cause, const char *text) {
  static const char *const what[] = {"jobs", "tensors", "tensor bytes"};
  uint64_t now = clock_ms();
  d->refusals[cause]++;
  if (d->refusal_log_ms[cause] && now - d->refusal_log_ms[cause] < LIMIT_LOG_MS) return;
  d->refusal_log_ms[cause] = now;
  LOG_WARN("refusing %s: %s (%llu refused so far)", what[cause], text,
           (unsigned long long)d->refusals[cause]);
}

static uint32_t lim32(const uint32_t *p, uint32_t dflt) {
  return p ? *p : dflt;
}

fgb_status limits_job_admit(core *d, char *err, size_t errlen) {
  uint32_t max = lim32(d->max_jobs, CORE_DEFAULT_MAX_JOBS);
  if (d->njobs < max) return FGB_OK;
  snprintf(err, errlen,
           "name: this daemon holds %u jobs, the limit is max_jobs %u (a job counts until its "
           "client is gone and its work done)",
           d->njobs, max);
  refusal_log(d, CAUSE_JOBS, err);
  return FGB_ENOMEM;
}

fgb_status limits_tensor_admit(core *d, const core_job *j, const char *name, uint64_t bytes,
                               const char **field, char *err, size_t errlen) {
  *field = "name";
  if (core_tensor_by_name(j, name))
    return snprintf(err, errlen, "name: tensor '%s' is already registered in job '%s'", name,
                    j->id.name),
           FGB_EEXIST;
  uint32_t max = lim32(d->max_tensors_per_job, CORE_DEFAULT_MAX_TENSORS_PER_JOB);
  if (j->ntensors >= max) {
    snprintf(err, errlen, "name: job '%s' holds %u tensors, the limit is max_tensors_per_job %u",
             j->id.name, j->ntensors, max);
    refusal_log(d, CAUSE_TENSORS, err);
    return FGB_ENOMEM;
  }
  uint64_t maxb = d->max_job_bytes ? *d->max_job_bytes : CORE_DEFAULT_MAX_JOB_BYTES;
  if (maxb == 0) maxb = UINT64_MAX; /* "unlimited" */
  if (bytes > maxb || j->tensor_bytes > maxb - bytes) {
    *field = "count";
    const char *from = d->max_job_bytes_from ? d->max_job_bytes_from : "";
    snprintf(err, errlen,
             "count: tensor '%s' of %llu bytes would bring job '%s' to %llu bytes of tensors, the "
             "limit is max_job_bytes %llu%s%s%s",
             name, (unsigned long long)bytes, j->id.name,
             (unsigned long long)(j->tensor_bytes + bytes), (unsigned long long)maxb,
             from[0] ? " (" : "", from, from[0] ? ")" : "");
    refusal_log(d, CAUSE_BYTES, err);
    return FGB_ENOMEM;
  }
  return FGB_OK;
}
