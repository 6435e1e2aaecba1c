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

/* ---- seeds: a 3-daemon world of coordinators in memory; what reaches the leader from ranks 1
 * and 2 and what reaches rank 1 from the leader is recorded, with the leader's local events as
 * the records above that make them ---------------------------------------------------------- */
static uint8_t *g_seed;
static size_t g_seed_len;

static void seed_rec(uint8_t sel, const uint8_t *p, size_t n) {
  g_seed = realloc(g_seed, g_seed_len + 3 + n);
  FZ_CHECK(g_seed && n < 65536);
  g_seed[g_seed_len] = sel;
  g_seed[g_seed_len + 1] = (uint8_t)n;
  g_seed[g_seed_len + 2] = (uint8_t)(n >> 8);
  if (n) memcpy(g_seed + g_seed_len + 3, p, n);
  g_seed_len += 3 + n;
}

static uint32_t g_keys[8];

/* Deliver every SEND until the world is quiet; note the leader's tensor keys. */
static void route(coord **w) {
  for (int moved = 1; moved;) {
    moved = 0;
    for (int x = 0; x < 3; x++) {
      coord_event ev;
      while (coord_next_event(w[x], &ev)) {
        if (ev.kind == COORD_EV_TENSOR_OK && x == 0 && ev.tensor_name[0] == 't')
          g_keys[(ev.tensor_name[1] - '0') & 7] = ev.tensor_key;
        if (ev.kind == COORD_EV_SEND) {
          char err[256];
          if (ev.peer == 0) seed_rec(x == 0 ? 2 : (uint8_t)(x - 1), ev.bytes, ev.len);
          if (ev.peer == 1 && x == 0) seed_rec(3, ev.bytes, ev.len);
          (void)coord_on_message(w[ev.peer], x, ev.bytes, ev.len, err, sizeof err);
          moved = 1;
        }
        coord_event_free(&ev);
      }
    }
  }
}

static void seed_world(const char *dir, const char *name, int variant) {
  coord *w[3];
  for (int r = 0; r < 3; r++) {
    coord_config cc = {.world_rank = r, .world_size = 3, .stall_ms = 50, .fusion_bytes = 1 << 20};
    w[r] = coord_new(&cc);
    coord_tick(w[r], 1000);
  }
  coord_job_id job = {.name = "j", .incarnation = 1};
  seed_rec(4, (const uint8_t[]){0, 2, variant == 1 ? 4 : 0, variant == 1 ? 2 : 0}, 4);
  for (int r = 0; r < 3; r++)
    FZ_CHECK(coord_join_fusion(w[r], &job, r, 3, variant == 1 ? 4 << 8 : 0, variant == 1 ? 2 : 0) ==
             FGB_OK);
  route(w);
  for (uint8_t t = 0; t < 2; t++) {
    coord_tensor_meta meta = {.dtype = FGB_FLOAT32, .ndim = 1, .count = 16, .shape = {16}};
    meta.bytes = 64;
    snprintf(meta.name, sizeof meta.name, "t%u", t);
    seed_rec(5, (const uint8_t[]){t, 15}, 2);
    for (int r = 0; r < 3; r++) FZ_CHECK(coord_register(w[r], &job, &meta) == FGB_OK);
    route(w);
  }
  for (uint8_t step = 1; step <= 2; step++) {
    uint32_t keys[2] = {g_keys[0], g_keys[1]};
    seed_rec(6, (const uint8_t[]){step, 0, 1}, 3);
    for (int r = 0; r < 3; r++)
      if (!(variant == 2 && step == 2 && r == 2)) (void)coord_ready(w[r], &job, step, keys, 2);
    route(w);
  }
  if (variant == 1) { /* rank 1 hints t1 fusable from step 3 (FUSE), then step 3 */
    uint32_t k1 = g_keys[1], keys[2] = {g_keys[0], g_keys[1]};
    FZ_CHECK(coord_fuse(w[1], &job, 1, 3, &k1, 1) == FGB_OK);
    route(w);
    seed_rec(6, (const uint8_t[]){3, 0, 1}, 3);
    for (int r = 0; r < 3; r++) (void)coord_ready(w[r], &job, 3, keys, 2);
    route(w);
  }
  if (variant == 2) { /* rank 2 never made step 2 ready: a stall, then rank 1 leaves mid-job */
    seed_rec(7, (const uint8_t[]){10}, 1);
    for (int r = 0; r < 3; r++) coord_tick(w[r], 1100);
    route(w);
    FZ_CHECK(coord_leave(w[1], &job, 1, "fuzz seed") == FGB_OK);
    route(w);
  }
  for (int r = 0; r < 3; r++) coord_free(w[r]);
  fz_write_seed(dir, name, g_seed, g_seed_len);
  free(g_seed);
  g_seed = NULL;
  g_seed_len = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *dir = getenv("FGB_FUZZ_SEEDS");
  if (!dir) return 0;
  seed_world(dir, "world", 0);
  seed_world(dir, "world-fusion", 1);
  seed_world(dir, "world-stall-leave", 2);
  exit(0);
}
