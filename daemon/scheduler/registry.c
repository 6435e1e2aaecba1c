/* daemon/scheduler/registry.c — the list of merge policies (adding one is adding a file and a
 * line here) and the "key=value,..." option parser they share.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

extern const sched_policy_ops sched_none_ops;
extern const sched_policy_ops sched_fusion_ops;
extern const sched_policy_ops sched_syncea_ops;
extern const sched_policy_ops sched_omgs_ops;
extern const sched_policy_ops sched_dear_ops;
extern const sched_policy_ops sched_fgbuff_ops;
extern const sched_policy_ops sched_rgmerge_ops;

static const sched_policy_ops *const policies[] = {
    &sched_none_ops, &sched_fusion_ops, &sched_syncea_ops,  &sched_omgs_ops,
    &sched_dear_ops, &sched_fgbuff_ops, &sched_rgmerge_ops,
};
#define NPOLICIES (sizeof policies / sizeof policies[0])

const sched_policy_ops *sched_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < NPOLICIES; i++)
    if (strcmp(policies[i]->name, name) == 0) return policies[i];
  return NULL;
}

/* Spelled out rather than filled from policies[] at run time, so concurrent callers share a
 * constant array with no initialisation race; test-registry checks it matches the ops tables. */
static const char *const names[] = {"none", "fusion", "syncea",  "omgs",
                                    "dear", "fgbuff", "rgmerge", NULL};
_Static_assert(sizeof names / sizeof names[0] == NPOLICIES + 1, "names[] and policies[] differ");

const char *const *sched_names(void) {
  return names;
}

fgb_status sched_opt_double(const char *options, const char *key, double def, double lo, double hi,
                            double *out, char *err, size_t errlen) {
  *out = def;
  if (!options || !key) return FGB_OK;
  size_t klen = strlen(key);
  const char *p = options;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      char val[64];
      size_t vlen = len - klen - 1;
      if (vlen == 0 || vlen >= sizeof val) {
        if (err && errlen) snprintf(err, errlen, "option %s: value missing or too long", key);
        return FGB_EINVAL;
      }
      memcpy(val, p + klen + 1, vlen);
      val[vlen] = '\0';
      char *stop;
      errno = 0;
      double v = strtod(val, &stop);
      if (errno || *stop != '\0' || !isfinite(v) || v < lo || v > hi) {
        if (err && errlen)
          snprintf(err, errlen, "option %s: '%s' is not a number in [%g, %g]", key, val, lo, hi);
        return FGB_EINVAL;
      }
      *out = v;
      /* keep scanning: the last occurrence wins, as in most key=value configs */
    }
    if (!end) break;
    p = end + 1;
  }
  return FGB_OK;
}

fgb_status sched_opt_check(const char *options, const char *const *known, const char *policy,
                           char *err, size_t errlen) {
  if (!options) return FGB_OK;
  const char *p = options;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    size_t klen = eq ? (size_t)(eq - p) : len;
    int ok = len == 0;
    for (size_t i = 0; !ok && known && known[i]; i++)
      ok = eq && strlen(known[i]) == klen && strncmp(known[i], p, klen) == 0;
    if (!ok) {
      if (err && errlen)
        snprintf(err, errlen, "policy %s: unknown option '%.*s'%s", policy ? policy : "?",
                 (int)(klen > 64 ? 64 : klen), p, eq ? "" : " (expected key=value)");
      return FGB_EINVAL;
    }
    if (!end) break;
    p = end + 1;
  }
  return FGB_OK;
}
