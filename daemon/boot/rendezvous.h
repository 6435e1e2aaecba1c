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
  /* Rank 0: non-NULL, the listening socket is kept open after formation and handed back here
   * (rdv_late_start serves members restarted later on it); NULL, it is closed. */
  int *keep_listener;
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

/* ---- shared with rdv_late.c: the hello and the answer ---------------------------------------- */
#define RDV_NONCE 16
#define RDV_REASON 128
#define RDV_HELLO (16 + RDV_NONCE + RDV_ADDR_MAX + RDV_HOST_MAX + 8) /* a hello's bytes */
#define RDV_PEND_MAX 64   /* connections that have not finished their hello */
#define RDV_HELLO_MS 5000 /* a peer's window for its hello */

/* A refusal the peer prints (best effort, non-blocking). */
void rdv_refuse(int fd, const char *why);
/* A complete hello's own checks (magic, world, rank range, key and MAC, address and hostname):
 * 0 and *rank, or -1 with the reason in why. Not whether the rank is taken. Its nonce is at
 * h + 16, its address at h + 16 + RDV_NONCE, its hostname RDV_ADDR_MAX bytes after. */
int rdv_hello_check(const rdv_args *a, const uint8_t *h, int *rank, char *why, size_t wl);
/* The answer to the peer whose hello carried nonce: the table (addrs, hosts) and token, MAC'ed and
 * the token sealed in keyed worlds; sent within 10 s. 0, or negative. */
int rdv_answer(const rdv_args *a, int fd, const uint8_t nonce[RDV_NONCE], const char *addrs,
               const char *hosts, const uint8_t token[RDV_TOKEN]);

#endif
