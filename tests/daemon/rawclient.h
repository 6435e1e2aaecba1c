/* tests/daemon/rawclient.h — a raw protocol client for tests: speaks frames directly (including
 * malformed ones, any number of fds) so the daemon's handling of bad input can be exercised. */
#ifndef FGB_TEST_RAWCLIENT_H
#define FGB_TEST_RAWCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff.pb-c.h"
#include "wire.h"

typedef struct raw {
  int fd;
  wire_reader rd;
  uint64_t next_req;
} raw;

/* Connect (blocking connect, then non-blocking socket). 0 or -1. */
int raw_connect(raw *r, const char *path);
void raw_close(raw *r);
/* Send bytes as they are (no framing). 0 or -1. */
int raw_send_bytes(raw *r, const void *b, size_t n);
/* Send one frame of `payload` with nfds fds (any number: no cap here). 0 or -1. */
int raw_send_frame(raw *r, const void *payload, uint32_t len, const int *fds, int nfds);
/* Pack and send an envelope; sets req_id (returned) unless env->req_id is set. num_fds is the
 * caller's (to be able to lie). */
uint64_t raw_send(raw *r, Fgbuff__V1__Envelope *env, const int *fds, int nfds);
/* Next envelope within timeout_ms, or NULL (timeout, EOF or error). Free with raw_free. */
Fgbuff__V1__Envelope *raw_recv(raw *r, int timeout_ms);
void raw_free(Fgbuff__V1__Envelope *e);
/* 1 when the daemon closed the connection within timeout_ms (replies before EOF are skipped). */
int raw_wait_closed(raw *r, int timeout_ms);
/* 1 when the daemon closed its end within timeout_ms, without reading anything (for a client that
 * must look like it stopped reading). */
int raw_wait_hangup(raw *r, int timeout_ms);
/* Hello v1 + HelloReply. 0 or -1. */
int raw_hello(raw *r);
/* JoinJob round trip; returns the reply (JoinReply or Error) or NULL. */
Fgbuff__V1__Envelope *raw_join(raw *r, const char *name, int rank, int size);
/* Sends RegisterArena{kind, bytes} with nfds fds and envelope num_fds (the caller's, to be able
 * to lie); returns the req_id. */
uint64_t raw_send_arena(raw *r, int kind, uint64_t bytes, const int *fds, int nfds,
                        uint32_t num_fds);
/* A memfd of `bytes` (zeroed) sealed against resizing (what the daemon accepts as an arena), or
 * -1. */
int raw_memfd(size_t bytes);
/* The same without seals (still sealable: F_ADD_SEALS works on it), or -1. */
int raw_memfd_unsealed(size_t bytes);

#endif
