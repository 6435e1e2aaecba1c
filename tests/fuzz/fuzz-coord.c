/* fuzz-coord: the coordinator's control-message decoder (daemon/scheduler/coord_wire.c) and what
 * the leader and a member do with what decodes (coord_on_message). The input is a list of
 * records: a selector byte, then a u16-length-prefixed message. Selectors 0..2 deliver it to the
 * leader (world rank 0 of 3) from rank 1, 2 or 0; 3 to the member (rank 1) from the leader; 4..6
 * are local events on the leader (a join, a tensor registration, a ready batch) so later
 * messages meet jobs and keys that exist; 7 advances time. Every message is also decoded on its
 * own: what decodes re-encodes, and that encoding decodes to the same bytes again; what does not
 * decode names its reason. Events are drained after each record, as the daemon does. */
#include "coord_internal.h"
#include "fuzz.h"

static void drain(coord *c) {
  coord_event ev;
  while (coord_next_event(c, &ev)) coord_event_free(&ev);
}

static void codec(const uint8_t *p, size_t n) {
  coord_msg m, m2;
  char err[256] = "";
  if (coord_msg_decode(p, n, &m, err, sizeof err) != FGB_OK) {
    FZ_CHECK(err[0]); /* every refusal names its reason */
    return;
  }
  uint8_t *a = NULL, *b = NULL;
  size_t la = 0, lb = 0;
  if (coord_msg_encode(&m, &a, &la) == FGB_OK) {
    FZ_CHECK(coord_msg_decode(a, la, &m2, err, sizeof err) == FGB_OK);
    FZ_CHECK(coord_msg_encode(&m2, &b, &lb) == FGB_OK);
    FZ_CHECK(la == lb && memcmp(a, b, la) == 0);
    coord_msg_clear(&m2);
  }
  free(a);
  free(b);
  coord_msg_clear(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  coord_config lc = {.world_rank = 0, .world_size = 3, .stall_ms = 50, .fusion_bytes = 1 << 20};
  coord_config mc = lc;
  mc.world_rank = 1;
  coord *leader = coord_new(&lc), *member = coord_new(&mc);
  FZ_CHECK(leader && member);
  coord_job_id job = {.name = "j", .incarnation = 1};
  uint64_t now = 1000;
  coord_tick(leader, now);
  coord_tick(member, now);
  fz_in in = {data, size, 0};
  while (fz_more(&in)) {
    uint8_t sel = fz_u8(&in);
    size_t n;
    const uint8_t *p = fz_chunk(&in, &n);
    char err[256] = "";
    switch (sel & 7) {
      case 0:
      case 1:
      case 2:
        codec(p, n);
        (void)coord_on_message(leader, (sel & 7) == 2 ? 0 : (sel & 7) + 1, p, n, err, sizeof err);
        break;
      case 3:
        codec(p, n);
        (void)coord_on_message(member, 0, p, n, err, sizeof err);
        break;
      case 4: /* a client of the leader's daemon joins job j (rank, size from the record) */
        (void)coord_join_fusion(leader, &job, n ? p[0] % 4 : 0, n > 1 ? 1 + p[1] % 4 : 1,
                                n > 2 ? (uint64_t)p[2] << 8 : 0, n > 3 ? p[3] % 5 : 0);
        break;
      case 5: { /* it registers a tensor (name and count from the record) */
        coord_tensor_meta meta = {.dtype = FGB_FLOAT32, .ndim = 1};
        snprintf(meta.name, sizeof meta.name, "t%u", n ? p[0] % 8 : 0);
        meta.count = meta.shape[0] = n > 1 ? 1 + p[1] : 1;
        meta.bytes = meta.count * 4;
        (void)coord_register(leader, &job, &meta);
        break;
      }
      case 6: { /* tensors (keys from the record) are ready for a step */
        uint32_t keys[8];
        uint32_t nk = 0;
        for (size_t i = 1; i < n && nk < 8; i++) keys[nk++] = p[i] % 8;
        (void)coord_ready(leader, &job, n ? p[0] : 0, keys, nk);
        break;
      }
      case 7:
        now += n ? (uint64_t)p[0] * 10 : 100;
        coord_tick(leader, now);
        coord_tick(member, now);
        if (n > 1 && p[1] == 0xff) coord_peer_lost(leader, 1 + p[0] % 2);
        break;
    }
    drain(leader);
    drain(member);
  }
  char js[4096];
  (void)coord_status_json(leader, js, sizeof js);
  (void)coord_status_json(member, js, sizeof js);
  coord_free(leader);
  coord_free(member);
  return 0;
}
