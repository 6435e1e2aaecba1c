/* proto/ring_layout.h — the layout of a connection's shared-memory submission ring (AttachRing in
 * fgbuff.proto; protocol in docs/protocol.md, "Submission ring"), shared by the client library
 * (producer, client/ring.c) and fgbuffd (consumer, daemon/ring.c). Same host, same byte order.
 *
 * The memfd holds a 256-byte header of four 64-byte lines, then `slots` records of slot_bytes.
 * Each line has one writer: line 0 is constant (client, before AttachRing), `head` is the client's,
 * `tail` and `awake` are the daemon's. The daemon trusts nothing it reads here. */
#ifndef FGB_RING_LAYOUT_H
#define FGB_RING_LAYOUT_H

#include <stdint.h>

#define FGB_RING_MAGIC 0x52424746u /* "FGBR" little-endian */
#define FGB_RING_VERSION 1u
#define FGB_RING_HDR 256u
#define FGB_RING_SLOT_BYTES 64u
#define FGB_RING_MIN_SLOTS 16u
#define FGB_RING_MAX_SLOTS 4096u
#define FGB_RING_DEFAULT_SLOTS 256u
/* Every record's `check`: the magic mixed with the low bits of its position, so a stale or
 * garbage slot is told from a written one. */
#define FGB_RING_REC_CHECK(pos) (0x43455246u ^ (uint32_t)(pos)) /* "FREC" */

/* Offsets in the header (bytes). */
#define FGB_RING_OFF_MAGIC 0       /* u32 FGB_RING_MAGIC */
#define FGB_RING_OFF_VERSION 4     /* u32 FGB_RING_VERSION */
#define FGB_RING_OFF_SLOTS 8       /* u32 */
#define FGB_RING_OFF_SLOT_BYTES 12 /* u32 */
#define FGB_RING_OFF_HEAD 64   /* u64: records written (client; store-release after the record) */
#define FGB_RING_OFF_TAIL 128  /* u64: records consumed (daemon; store-release) */
#define FGB_RING_OFF_AWAKE 192 /* u32: 1 = the daemon polls the ring, 0 = ring the doorbell */

/* One record (the first 48 bytes of a slot): what a Submit carries plus ordering. */
typedef struct fgb_ring_rec {
  uint64_t pos;        /* this record's position: the head value before it was written */
  uint64_t req_id;     /* the client's request id, echoed by an Error about this Submit */
  uint64_t sock_count; /* socket frames the client had sent when it wrote this record */
  uint64_t step;
  uint32_t tensor_id;
  uint32_t event_slot;
  uint32_t done_seq;
  uint32_t check; /* FGB_RING_REC_CHECK(pos) */
} fgb_ring_rec;

_Static_assert(sizeof(fgb_ring_rec) == 48, "ring record layout");
_Static_assert(sizeof(fgb_ring_rec) <= FGB_RING_SLOT_BYTES, "ring record fits a slot");

#endif
