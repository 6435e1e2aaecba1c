/* daemon/net/linger.h — the last replies of a closed session (a fatal Error, usually) written from
 * the loop, never with a blocking flush: a client that leaves its replies unread must not stall
 * the loop thread that every job shares. */
#ifndef FGB_LINGER_H
#define FGB_LINGER_H

#include <uv.h>

#include "net.h"

/* How long a closed session's queued replies may take to drain before the socket is closed. */
#define LINGER_MS 200

/* Called by server_close, after the session left every list, with its poll handle still
 * open: when replies are queued, takes the handle over (writable only), closes it with free_cb
 * once they are written, the peer hangs up or LINGER_MS passed, and returns 1. Returns 0
 * (nothing queued, the socket failed, no memory): the caller closes the handle itself. */
int linger_start(srv_conn *s, uv_close_cb free_cb);

#endif
