/* tests/net/netkit.h — what the server and ring unit tests share: daemon/net/server.c on a real
 * libuv loop in this process, listening in a temporary directory, with fake server_cbs that
 * record what reaches them per session, and a client side of plain non-blocking Unix sockets. */
#ifndef FGB_TESTS_NETKIT_H
#define FGB_TESTS_NETKIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clock.h"
#include "net.h"

#define NK_MAX_SESS 256

/* What the fake callbacks saw of one session (indexed by srv_conn.id, which starts at 1). */
typedef struct nk_sess {
  srv_conn *c; /* while open */
  uid_t uid;   /* SO_PEERCRED's */
  int opened, closed;
  int frames;
  uint8_t *last; /* a copy of the last frame handed up */
  uint32_t last_len;
  int last_nfds;
  ino_t last_ino[8]; /* the inodes of the fds that came with it (then closed, as the callee must) */
  int fatal;         /* on_fatal calls; the first one's arguments: */
  int fatal_code;
  char fatal_field[32], fatal_msg[256];
} nk_sess;

extern uv_loop_t nk_loop;
extern srv_net nk_net;
extern nk_sess nk_sess_of[NK_MAX_SESS];
/* Optional: called by on_frame first; returns 1 when it took the fds. */
extern int (*nk_frame_hook)(srv_conn *c, const uint8_t *frame, uint32_t len, int *fds, int nfds);

/* The fake layer's fatal refusal (server_cbs.on_fatal; ring tests hand it to ring_cbs too): records
 * it, queues "ERR <code> <field>: <msg>" as a reply frame, closes the session. */
void nk_fatal(srv_conn *c, int code, const char *field, const char *msg);
/* Start the server (socket in a fresh temporary directory, with nk_net.access's modes if set, else
 * 0700 and 0600; nk_net's allow lists as the caller set them), SIGPIPE ignored; nk_stop at the end
 * stops it, runs the loop until every handle closed, and removes the directory. */
void nk_start(void);
void nk_stop(void);
/* Run the loop without blocking for up to ms, stopping as soon as cond holds. */
#define NK_PUMP_UNTIL(cond, ms)                                        \
  do {                                                                 \
    uint64_t nk_t0_ = clock_ms();                                      \
    while (!(cond) && clock_ms() - nk_t0_ < (uint64_t)(ms)) nk_step(); \
  } while (0)
/* One non-blocking pass of the loop, then a 200 us nap. */
void nk_step(void);
/* Connect a client (non-blocking fd); *id gets its session once the server accepted it. */
int nk_connect(uint64_t *id);
/* Send all of buf (blocking until the socket takes it, the loop is not run). */
void nk_send_all(int fd, const void *buf, size_t len);
/* Send bytes with fds attached (SCM_RIGHTS). */
void nk_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds);
/* A frame's header. */
void nk_put_len(uint8_t *p, uint32_t len);
/* Read one whole frame the server sent (waiting up to ms, the loop running meanwhile): its payload
 * length, or -1 on EOF / error, -2 on timeout. */
long nk_read_frame(int fd, uint8_t *buf, size_t cap, int ms);
/* 1 once the server closed its end of fd (a send fails with EPIPE). */
int nk_peer_closed(int fd);

#endif
