/* proto/wire.h — framing of fgbuff protocol messages on stream sockets, shared by client and
 * daemon.
 *
 * A frame is a 4-byte little-endian length followed by that many bytes of a packed protobuf
 * message. File descriptors ride as SCM_RIGHTS on the sendmsg that carries the frame's first byte.
 * The reader here is incremental (for non-blocking sockets driven by uv_poll) and bounds everything
 * it accepts.
 */
#ifndef FGB_WIRE_H
#define FGB_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define FGB_WIRE_MAX_FRAME \
  (1u << 20) /* 1 MiB: status documents and state chunks fit; more is hostile */
/* fds per frame; more is refused (and the extra fds closed). 5: a VMM arena's 4 allocations and its
 * done page. A daemon says what it takes in HelloReply.max_fds (older ones: 4, field absent). */
#define FGB_WIRE_MAX_FDS 5
#define FGB_WIRE_HDR 4

/* Write a frame's header (its payload length, little-endian) at p. */
static inline void wire_put_len(uint8_t p[FGB_WIRE_HDR], uint32_t len) {
  p[0] = (uint8_t)len;
  p[1] = (uint8_t)(len >> 8);
  p[2] = (uint8_t)(len >> 16);
  p[3] = (uint8_t)(len >> 24);
}

/* Incremental frame reader. Caller-allocated; wire_reader_init before use, wire_reader_close after.
 */
typedef struct wire_reader {
  uint8_t hdr[FGB_WIRE_HDR];
  uint32_t hdr_have;
  uint32_t frame_len; /* valid once hdr_have == FGB_WIRE_HDR */
  uint8_t *buf;       /* frame_len bytes once allocated */
  uint32_t have;
  int fds[FGB_WIRE_MAX_FDS * 2]; /* received fds not yet claimed by a complete frame */
  int nfds;
  int fd_overflow; /* more fds arrived than allowed: the connection is hostile */
  int ctrunc;      /* the kernel truncated ancillary data (MSG_CTRUNC) */
} wire_reader;

void wire_reader_init(wire_reader *r);
/* Closes fds still held and frees the buffer. */
void wire_reader_close(wire_reader *r);

/* Result of wire_read. */
typedef enum {
  WIRE_FRAME = 1,   /* a complete frame: frame and len valid until the next call; fds in out_fds */
  WIRE_AGAIN = 0,   /* need more bytes (EAGAIN) */
  WIRE_EOF = -1,    /* orderly close between frames */
  WIRE_ERR_IO = -2, /* recvmsg failed, or close in the middle of a frame (truncated frame) */
  WIRE_ERR_SIZE = -3, /* announced length is 0 or above FGB_WIRE_MAX_FRAME */
  WIRE_ERR_FDS = -4,  /* too many fds or truncated ancillary data */
} wire_status;

/* Read from a non-blocking socket until one frame is complete or the socket would block.
 * On WIRE_FRAME, the fds that arrived with the frame are moved to out_fds (up to FGB_WIRE_MAX_FDS;
 * *out_nfds set) and belong to the caller, who must check them against the envelope's num_fds.
 * `errbuf` gets a message for the error results. */
wire_status wire_read(wire_reader *r, int sock, const uint8_t **frame, uint32_t *len, int *out_fds,
                      int *out_nfds, char *errbuf, size_t errlen);

/* Blocking send of one frame with optional fds. Retries on EINTR and partial writes; MSG_NOSIGNAL.
 * Returns 0 or -errno. */
int wire_send(int sock, const void *payload, uint32_t len, const int *fds, int nfds);

/* wire_read on a non-blocking socket, waiting with poll() up to timeout_ms (< 0: forever) for a
 * whole frame (for the client library and tests). A timeout gives WIRE_AGAIN and keeps the partial
 * frame in the reader, so the next call continues it. */
wire_status wire_read_wait(wire_reader *r, int sock, int timeout_ms, const uint8_t **frame,
                           uint32_t *len, int *out_fds, int *out_nfds, char *errbuf, size_t errlen);

#endif
