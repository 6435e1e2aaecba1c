/* daemon/boot/rdv_late.h — rank 0 of a world formed by the rendezvous keeps serving its port after
 * formation, so that a member whose daemon was lost can come back without restarting the world:
 * the restarted daemon (same --rendezvous/--rank/--world) sends its usual hello; when grant says
 * the rank may come back, it is answered with the current table (its own new address in it) and a
 * one-time token, which it then presents in its control-plane hello instead of the world's secret
 * (net/ctrl.c's rejoin hook). Keyed worlds MAC and seal it as at formation. */
#ifndef FGB_BOOT_RDV_LATE_H
#define FGB_BOOT_RDV_LATE_H

#include <stddef.h>
#include <stdint.h>

#include "rendezvous.h"

typedef struct rdv_late rdv_late;

/* Called on the server's thread for a well-formed hello of rank `rank` from a daemon at addr: 0
 * and a fresh one-time token, or nonzero with the reason the peer is told (e.g. the rank is not
 * lost). */
typedef int (*rdv_grant_fn)(void *ud, int rank, const char *addr, uint8_t token[RDV_TOKEN],
                            char *why, size_t wl);

/* Serve the listener ls (rdv_args.keep_listener) with a's world and key and the table the world
 * formed with (addrs, hosts: copied); NULL with err on failure. */
rdv_late *rdv_late_start(int ls, const rdv_args *a, const char *addrs, const char *hosts,
                         rdv_grant_fn grant, void *ud, char *err, size_t errlen);
/* Stop the thread and close the listener. */
void rdv_late_stop(rdv_late *l);

#endif
