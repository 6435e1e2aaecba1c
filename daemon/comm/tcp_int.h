/* daemon/comm/tcp_int.h — what the TCP transport's files share: the communicator and request
 * structs, the wire layouts, and one section per file (tcp.c: ops, queue and worker; tcp_boot.c:
 * the bootstrap root and a rank's mesh; tcp_coll.c: the collectives over the mesh). */
#ifndef FGB_COMM_TCP_INT_H
#define FGB_COMM_TCP_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define TCP_SECRET 16
#define TCP_MAX_RANKS 4096
#define TCP_ERR 256
#define TCP_SEG ((size_t)1 << 20) /* bytes per data message at most */

/* The uid (make_uid): magic, the root's IPv4 (network order), port (LE), 2 pad, the secret. */
#define TCP_UID_MAGIC 0x31554746u /* "FGU1" */
#define TCP_UID_LEN 28

/* Every bootstrap message starts with magic (u32 LE) and its total length (u32 LE). */
#define TCP_REG_MAGIC 0x52544746u /* "FGTR": a rank's registration with the root */
#define TCP_REG_LEN 48            /* +8 secret, +24 job_key, +32 rank, +36 size, +40 ip, +44 port */
#define TCP_TAB_MAGIC 0x41544746u /* "FGTA": the root's table: +4 job_size, then 8 B per rank */
#define TCP_NAK_MAGIC 0x4e544746u /* "FGTN": the root's refusal: +4 length, then the reason */
#define TCP_HELLO_MAGIC \
  0x48544746u /* "FGTH": a data connection: +8 secret, +24 key, +32 from, +36 to */
#define TCP_HELLO_LEN 40
#define TCP_ACK_MAGIC 0x4b544746u  /* "FGTK": the acceptor's answer: +4 its rank */
#define TCP_DATA_MAGIC 0x44544746u /* "FGTD": a data message header (tcp_coll.c) */
#define TCP_DATA_HDR 32

struct comm_req {
  comm *c;
  int op; /* TCP_OP_* */
  const void *send;
  void *recv;
  size_t count; /* allreduce: elements; allgather: bytes per rank; broadcast: bytes; RS: per rank */
  fgb_dtype dt;
  int root;
  size_t stride;
  size_t *v;      /* allgatherv: rbytes; alltoallv: sbytes, soff, rbytes (copies) */
  _Atomic int st; /* 0 queued or running, 1 done, negative: the fgb_status it failed with */
  char err[TCP_ERR];
  comm_req *next;          /* the queue */
  comm_req *lprev, *lnext; /* every request not yet handed back by test() (destroy frees them) */
};

enum { TCP_OP_ALLREDUCE, TCP_OP_ALLGATHER, TCP_OP_BCAST, TCP_OP_RS, TCP_OP_AGV, TCP_OP_A2AV };

struct comm {
  int rank, size;
  uint64_t job_key;
  uint8_t secret[TCP_SECRET];
  struct sockaddr_in root;
  uint64_t t0_ms;   /* create */
  int *fd;          /* per job rank: the data socket to it (-1: this rank) */
  int lfd, bfd;     /* bootstrap: this rank's listener, its connection to the root (-1: none) */
  int wake;         /* eventfd: readable once aborted; every poll of the worker watches it */
  _Atomic int port; /* the listener's port once open (tests connect strangers to it) */
  pthread_t th;
  int th_started;
  pthread_mutex_t mu; /* guards the queue, the live list, stop/aborted and the fds abort shuts */
  pthread_cond_t cv;
  comm_req *qhead, *qtail, *live;
  int stop, aborted, busy; /* busy: the worker runs a request */
  _Atomic int state;       /* 0 forming, 1 ready, negative: failed (err says why) */
  char err[TCP_ERR];
  /* Worker thread only. */
  uint64_t seq; /* collectives run so far: each data header carries it */
  int broken;   /* a failed collective desynchronised the streams: later ones fail at once */
  char berr[TCP_ERR];
};

static inline void tcp_put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void tcp_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void tcp_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t tcp_get16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t tcp_get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t tcp_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* tcp_boot.c */
/* The bootstrap deadline, ms (FGBUFF_TCP_TIMEOUT_MS). */
int tcp_timeout_ms(void);
/* Parse a uid into the root's address and the secret; FGB_EINVAL with a message if malformed. */
fgb_status tcp_uid_parse(const uint8_t *uid, size_t len, struct sockaddr_in *root,
                         uint8_t secret[TCP_SECRET], char *err, size_t errlen);
fgb_status tcp_make_uid(uint8_t *uid, size_t *len, char *err, size_t errlen);
/* A rank's bootstrap on its worker: listener, registration, table, mesh. 0 or a negative
 * fgb_status with c->err set. */
int tcp_boot(comm *c);
/* Both sides compare secrets without an early exit. */
int tcp_secret_eq(const uint8_t *a, const uint8_t *b);
/* Record (or clear, fd -1) a socket abort() must shut down: slot is c->fd + j, &c->lfd or &c->bfd.
 */
void tcp_track(comm *c, int *slot, int fd);
/* Wait for fd (POLLIN or POLLOUT) or the abort eventfd until deadline_ms (0: none). 1 ready,
 * 0 timed out, -1 aborted. */
int tcp_wait(comm *c, int fd, short ev, uint64_t deadline_ms);

/* tcp_coll.c */
/* Run one request on the worker; 0 or a negative fgb_status with q->err set. */
int tcp_coll_run(comm *c, comm_req *q);

/* tcp.c (tests): the port of the listener of a communicator still forming, 0 before it is open. */
int comm_tcp_listen_port(comm *c);

#endif
