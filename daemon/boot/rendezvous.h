/* daemon/boot/rendezvous.h — world formation without MPI, for GPU daemons started by systemd
 * (--rendezvous HOST:PORT --rank R --world N). World rank 0 listens on HOST:PORT; every other rank
 * connects (retrying until the deadline) and sends its rank, the world size, its control-plane
 * address and its hostname; once all have arrived, rank 0 answers each with the full table and the
 * control plane's secret token. The result is what MPI_Allgather + MPI_Bcast give under a launcher.
 * Blocking, before the loop starts. Wire and secret handling: rendezvous.c and docs. */
#ifndef FGB_BOOT_RENDEZVOUS_H
#define FGB_BOOT_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

#define RDV_ADDR_MAX 128 /* = CTRL_ADDR_MAX */
#define RDV_HOST_MAX 64
#define RDV_TOKEN 16 /* = CTRL_TOKEN */
#define RDV_KEY 16   /* a shared secret file's key */

typedef struct rdv_args {
  const char *hostport; /* rank 0's HOST:PORT */
  int rank, world;
  const char *addr; /* this daemon's control-plane address, < RDV_ADDR_MAX */
  const char *host; /* this daemon's hostname (for local indices), < RDV_HOST_MAX */
  /* NULL: rank 0 makes the token and sends it in the clear to any peer with a well-formed hello
   * (whoever reaches the port during formation can learn it). Else the world's shared key: every
   * hello and answer carries a SipHash MAC under it, and the token travels encrypted. */
  const uint8_t *key;
  int timeout_ms;
} rdv_args;

/* SipHash-2-4 of in[0..len) under a 16-byte key (exposed for its test vector). */
uint64_t rdv_siphash(const uint8_t k[RDV_KEY], const uint8_t *in, size_t len);

/* addrs: world * RDV_ADDR_MAX bytes and hosts: world * RDV_HOST_MAX bytes, filled in rank order;
 * token: the control plane's secret (made by rank 0 with getrandom). Bad peers (wrong magic, rank
 * out of range or taken, another world size, bad MAC) get a refusal naming the problem and are
 * waited for again; silent peers cannot stall the others. FGB_ETIMEDOUT names the ranks still
 * missing; FGB_EPROTO when rank 0 refused us (err has its reason); FGB_EIO for socket errors. */
fgb_status rdv_exchange(const rdv_args *a, char *addrs, char *hosts, uint8_t token[RDV_TOKEN],
                        char *err, size_t errlen);

/* This rank's position among the ranks whose hostname equals its own (the local index). */
int rdv_local_index(const char *hosts, int world, int rank);

/* Read a world's shared key: a file of exactly 32 hex digits (optionally a trailing newline),
 * readable by its owner only (e.g. `openssl rand -hex 16 > f; chmod 600 f`). */
fgb_status rdv_read_key(const char *path, uint8_t key[RDV_KEY], char *err, size_t errlen);

#endif
