/* daemon/rpc/metrics.h — the daemon's counters as Prometheus text, and the opt-in HTTP listener
 * that serves them (--metrics-listen). Loop thread only. */
#ifndef FGB_SRV_METRICS_H
#define FGB_SRV_METRICS_H

#include <stddef.h>

#include "fgbuff/client.h"

struct srv;
/* The exposition text (malloc'ed), or NULL when out of memory. */
char *srv_metrics_text(struct srv *d);
/* Listen on IPV4:PORT+local index (127.0.0.1:9400 for daemon 0, :9401 for 1, ...) and answer
 * GET /metrics; err names a bad address or a port in use. */
fgb_status srv_metrics_listen(struct srv *d, const char *hostport, char *err, size_t errlen);
/* Stop listening (shutdown). */
void srv_metrics_close(void);

#endif
