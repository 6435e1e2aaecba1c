/* fuzz-ring: the daemon's submission-ring reader (daemon/net/ring.c). A ring is shared memory the
 * client writes while the daemon reads it, so the input plays the client: it picks the ring's
 * size at attach, then writes slots, the header and the head index between the daemon's looks
 * (ring_drain) and moves the session's count of socket frames. What the reader hands up must
 * be a record it checked (position, check word, order), consumed in order, and never more than
 * the ring holds per look; garbage must end in one fatal refusal. */
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "log.h"
#include "net.h"
#include "ring.h"
#include "ring_layout.h"

static uint64_t g_next_pos; /* the position the next record handed up must have */
static int g_fatal;

static void on_record(srv_conn *s, const fgb_ring_rec *rec) {
  FZ_CHECK(!g_fatal && rec->pos == g_next_pos && rec->check == FGB_RING_REC_CHECK(rec->pos));
  FZ_CHECK(rec->sock_count == s->frames_in);
  g_next_pos++;
}

static void on_fatal(srv_conn *s, int code, const char *field, const char *msg) {
  FZ_CHECK(code == FGB_EPROTO && field && msg && msg[0] && !g_fatal);
  g_fatal = 1;
  s->close_why = "fatal"; /* as the session's fatal Error does: no more looks */
}

static const ring_cbs cbs = {on_record, on_fatal};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in in = {data, size, 0};
  uv_loop_t loop;
  FZ_CHECK(uv_loop_init(&loop) == 0);
  srv_net net = {.loop = &loop};
  srv_conn conn = {.net = &net, .id = 1};
  uint32_t slots = FGB_RING_MIN_SLOTS << (fz_u8(&in) % 3); /* 16, 32 or 64 */
  size_t bytes = FGB_RING_HDR + (size_t)slots * FGB_RING_SLOT_BYTES;
  int fds[2] = {memfd_create("fuzz-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING),
                eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  FZ_CHECK(fds[0] >= 0 && fds[1] >= 0 && ftruncate(fds[0], (off_t)bytes) == 0);
  FZ_CHECK(fcntl(fds[0], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  uint8_t *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  FZ_CHECK(m != MAP_FAILED);
  uint32_t hdr[4] = {FGB_RING_MAGIC, FGB_RING_VERSION, slots, FGB_RING_SLOT_BYTES};
  memcpy(m, hdr, sizeof hdr);
  ring_sizes sz = {slots, FGB_RING_SLOT_BYTES};
  const char *field = NULL;
  char err[256];
  g_next_pos = 0;
  g_fatal = 0;
  int att = fz_u8(&in);
  if (att == 0xff) { /* a lying header at attach must be refused */
    m[0] ^= 1;
    FZ_CHECK(ring_attach(&conn, &sz, fds, 2, &cbs, &field, err, sizeof err) != FGB_OK);
    FZ_CHECK(field && err[0]);
    goto out;
  }
  FZ_CHECK(ring_attach(&conn, &sz, fds, 2, &cbs, &field, err, sizeof err) == FGB_OK);
  uint64_t head = 0;
  while (fz_more(&in) && !g_fatal) {
    uint8_t op = fz_u8(&in);
    switch (op & 7) {
      case 0: { /* a well-formed record at the head, then publish it */
        fgb_ring_rec r = {.pos = head,
                          .req_id = fz_u8(&in),
                          .sock_count = conn.frames_in + (fz_u8(&in) % 3 == 0),
                          .step = fz_u8(&in),
                          .tensor_id = fz_u8(&in),
                          .check = FGB_RING_REC_CHECK(head)};
        memcpy(m + FGB_RING_HDR + (head & (slots - 1)) * FGB_RING_SLOT_BYTES, &r, sizeof r);
        head++;
        memcpy(m + FGB_RING_OFF_HEAD, &head, sizeof head);
        break;
      }
      case 1: { /* raw bytes into a slot */
        size_t n;
        const uint8_t *p = fz_chunk(&in, &n);
        size_t slot = fz_u8(&in) & (slots - 1);
        memcpy(m + FGB_RING_HDR + slot * FGB_RING_SLOT_BYTES, p,
               n < FGB_RING_SLOT_BYTES ? n : FGB_RING_SLOT_BYTES);
        break;
      }
      case 2: /* any head */
        head = (uint64_t)fz_u32(&in) | (uint64_t)fz_u32(&in) << 32;
        memcpy(m + FGB_RING_OFF_HEAD, &head, sizeof head);
        break;
      case 3: /* the head moves by a little */
        head += fz_u8(&in) % (2 * slots);
        memcpy(m + FGB_RING_OFF_HEAD, &head, sizeof head);
        break;
      case 4: { /* a byte of the header (magic, version, sizes, tail, awake) */
        uint8_t at = fz_u8(&in);
        m[at % FGB_RING_HDR] = fz_u8(&in);
        break;
      }
      case 5: /* a socket frame was handled */
        conn.frames_in++;
        break;
      default: {
        uint64_t before = g_next_pos;
        int n = ring_drain(&conn);
        FZ_CHECK(n >= 0 && (uint64_t)n == g_next_pos - before && (uint32_t)n <= slots);
        FZ_CHECK(ring_submits(&conn) == g_next_pos);
        break;
      }
    }
  }
  (void)ring_drain(&conn);
  ring_close(&conn);
out:
  FZ_CHECK(conn.ring == NULL);
  munmap(m, bytes);
  uv_run(&loop, UV_RUN_DEFAULT); /* the ring's handle closes: its mapping and eventfd go */
  FZ_CHECK(uv_loop_close(&loop) == 0);
  return 0;
}

/* ---- seeds ---------------------------------------------------------------------------------- */
static void seed(const char *dir, const char *name, const uint8_t *p, size_t n) {
  fz_write_seed(dir, name, p, n);
  FZ_CHECK(LLVMFuzzerTestOneInput(p, n) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  log_set_level(LOG_LEVEL_ERROR); /* a refusal logs a line: only errors */
  const char *dir = getenv("FGB_FUZZ_SEEDS");
  if (!dir) return 0;
  /* records in order with socket frames: one due now, one after the next frame */
  static const uint8_t order[] = {0, 0, 0, 1, 1, 1, 1, 6, 0, 2, 0,  2, 1,
                                  6, 5, 6, 0, 3, 1, 3, 1, 6, 3, 40, 6};
  seed(dir, "order", order, sizeof order);
  uint8_t full[2 + 64 * 5 + 1] = {2, 0};
  for (int i = 0; i < 64; i++) memcpy(full + 2 + i * 5, (const uint8_t[]){0, 1, 1, 1, 1}, 5);
  full[sizeof full - 1] = 6;
  seed(dir, "full", full, sizeof full);
  static const uint8_t header[] = {0, 0xff};
  seed(dir, "bad-header", header, sizeof header);
  static const uint8_t garbage[] = {1, 0, 0, 1, 4, 0, 1, 2, 3, 0, 6, 3, 1, 6, 4, 0, 0x47, 6};
  seed(dir, "garbage", garbage, sizeof garbage);
  exit(0);
}
