/* client/ring.h — the client's side of the shared-memory submission ring (docs/protocol.md,
 * "Submission ring"; layout in proto/ring_layout.h): fgb_connect attaches one per connection when
 * the daemon offers it, and fgb_submit writes its Submits there instead of on the socket. */
#ifndef FGB_CLIENT_RING_H
#define FGB_CLIENT_RING_H

#include <stdint.h>

#include "internal.h"

/* Creates the ring (sealed memfd + eventfd doorbell) and hands it to the daemon (AttachRing).
 * Returns FGB_OK with c->ring set, FGB_OK without a ring when FGBUFF_SUBMIT_RING=0, the daemon
 * refused it or the ring could not be created (the socket carries Submits then), or the status of
 * a lost connection. */
fgb_status cli_ring_attach(fgb_client *c);

/* Writes one Submit record and publishes it (the head), without the doorbell. 1: written; 0: the
 * ring is full, send this Submit on the socket (the daemon keeps the order: proto/ring_layout.h's
 * sock_count). req_id and sock_count: the request id and the number of frames sent so far. After
 * one or more puts, cli_ring_kick before the call returns (and before anything goes on the
 * socket), so that a sleeping daemon wakes once for all of them. */
int cli_ring_put(struct cli_ring *r, uint64_t req_id, uint64_t sock_count,
                 const Fgbuff__V1__Submit *m);
/* Rings the doorbell if the daemon sleeps (one eventfd write for every record put since). */
void cli_ring_kick(struct cli_ring *r);

void cli_ring_free(struct cli_ring *r);

#endif
