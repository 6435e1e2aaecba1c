/* daemon/rendezvous.h — control-plane address exchange without MPI, for worlds started by systemd
 * (GPU daemons: --rendezvous HOST:PORT --rank R --world N). World rank 0 listens on HOST:PORT;
 * every other rank connects (retrying until the deadline) and sends its rank, the world size and
 * its control-plane address; once all have arrived, rank 0 answers each with the full table. The
 * result is what MPI_Allgather gives under a launcher. Blocking, before the loop starts. */
#ifndef FGB_SRV_RENDEZVOUS_H
#define FGB_SRV_RENDEZVOUS_H

#include <stddef.h>

#include "fgbuff/client.h"

#define RDV_ADDR_MAX 128 /* = CTRL_ADDR_MAX */

/* addrs: world * RDV_ADDR_MAX bytes, filled in rank order (my_addr at [rank]). Peers with a bad
 * hello (rank out of range or taken, another world size) are turned away and waited for again.
 * FGB_ETIMEDOUT names the ranks still missing; FGB_EIO/FGB_EPROTO for socket or peer errors. */
fgb_status srv_rdv_exchange(const char *hostport, int rank, int world, const char *my_addr,
                            char *addrs, int timeout_ms, char *err, size_t errlen);

#endif
