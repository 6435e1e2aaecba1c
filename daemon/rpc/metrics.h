/* daemon/rpc/metrics.h — the daemon's counters as Prometheus text, and the opt-in HTTP listener
 * that serves them (--metrics-listen). Loop thread only. */
#ifndef FGB_RPC_METRICS_H
#define FGB_RPC_METRICS_H

#include <stddef.h>

#include "fgbuff/client.h"

struct srv;
struct status_query;
/* The exposition text (malloc'ed), or NULL when out of memory. The per-job series are those of
 * the jobs q selects as it does for the status (NULL: every job); max > 0: the text is at most
 * max bytes, leaving out the last selected jobs' series to fit, and says so (a comment line and
 * fgbuff_metrics_truncated 1; fgbuff_metrics_jobs_shown counts the jobs left in). 0: whole. */
char *metrics_text(struct srv *d, const struct status_query *q, size_t max);
/* Listen on IPV4:PORT+local index (127.0.0.1:9400 for daemon 0, :9401 for 1, ...) and answer
 * GET /metrics; err names a bad address or a port in use. */
fgb_status metrics_listen(struct srv *d, const char *hostport, char *err, size_t errlen);
/* Stop listening (shutdown). */
void metrics_close(void);

#endif
