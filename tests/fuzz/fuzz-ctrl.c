/* fuzz-ctrl: the control plane's framing (daemon/net/ctrl.c) as the leader sees it. A leader of a
 * 2-daemon world listens on 127.0.0.1; each input is the byte stream of one TCP connection to it
 * (what a stranger or a peer daemon sends: the hello with the world's secret, which the seeds
 * carry, then frames), written and then closed while the leader's loop runs. Whatever the leader
 * hands up must lie inside a frame it accepted, and a closed connection must leave no peer behind:
 * the next input may say hello as rank 1 again. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "ctrl.h"
#include "fuzz.h"
#include "log.h"

/* The world's secret in this harness (the seeds' hellos carry it). */
static const uint8_t token[CTRL_TOKEN] = "fgbuff-fuzz-tok";

static uv_loop_t loop;
static srv_net net;
static struct sockaddr_in leader;
static int lost;

static fgb_status on_message(void *ud, int src, const uint8_t *bytes, size_t len, char *err,
                             size_t errlen) {
  (void)ud;
  FZ_CHECK(src >= 0 && src < net.world_size && len <= CTRL_MAX_FRAME);
  uint8_t *copy = malloc(len ? len : 1); /* ASan: every byte handed up lies in the buffer */
  FZ_CHECK(copy);
  memcpy(copy, bytes, len);
  free(copy);
  if (len && bytes[0] == 0xee) return snprintf(err, errlen, "refused"), FGB_EPROTO;
  return FGB_OK;
}

static void on_peer_lost(void *ud, int rank, const char *why) {
  (void)ud;
  FZ_CHECK(rank == 1 && why && why[0]);
  lost++;
}

static void after_input(void *ud) {
  (void)ud;
}

static const ctrl_cbs cbs = {on_message, on_peer_lost, after_input, NULL};

/* ---- seeds: a peer's hello and frames ---------------------------------------------------------
 */
static uint8_t g_seed[4096];
static size_t g_seed_len;

static void put32(uint32_t v) {
  for (int i = 0; i < 4; i++) g_seed[g_seed_len++] = (uint8_t)(v >> (8 * i));
}

static void frame(int src, int dst, const void *p, size_t n) {
  put32((uint32_t)(8 + n));
  put32((uint32_t)src);
  put32((uint32_t)dst);
  memcpy(g_seed + g_seed_len, p, n);
  g_seed_len += n;
}

static void seed_write(const char *dir, const char *name) {
  fz_write_seed(dir, name, g_seed, g_seed_len);
  g_seed_len = 0;
}

static void write_seeds(const char *dir) {
  frame(1, -1, token, CTRL_TOKEN);
  frame(1, 0, "\x01\x02hello", 7);
  frame(1, 1, "to myself, through the leader", 29);
  frame(1, 0, "\xee refused", 9);
  seed_write(dir, "peer");
  frame(1, -1, token, CTRL_TOKEN);
  frame(1, 5, "bad rank", 8);
  seed_write(dir, "bad-rank");
  frame(1, -1, "not-the-secret!", CTRL_TOKEN);
  seed_write(dir, "stranger");
  put32(64u << 20);
  seed_write(dir, "big-before-hello");
  /* the right secret from a negative rank: the refusal's log line read the lost-rank table at
   * that index (a heap overflow this target found in the merged heartbeat code) */
  frame(-3, -1, token, CTRL_TOKEN);
  seed_write(dir, "regress-hello-negative-rank");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  log_set_level(LOG_LEVEL_ERROR); /* refusals log a line each: only errors */
  FZ_CHECK(uv_loop_init(&loop) == 0);
  net.loop = &loop;
  net.world_rank = 0;
  net.world_size = 2;
  net.cp_addr = "127.0.0.1";
  char addr[CTRL_ADDR_MAX], err[256];
  FZ_CHECK(ctrl_listen(&net, &cbs, NULL, addr, err, sizeof err) == FGB_OK);
  /* every rank's address, as the world's address exchange hands them (the leader keeps them all
   * to name a lost peer) */
  static char addrs[2 * CTRL_ADDR_MAX];
  memcpy(addrs, addr, CTRL_ADDR_MAX);
  memcpy(addrs + CTRL_ADDR_MAX, addr, CTRL_ADDR_MAX);
  FZ_CHECK(ctrl_connect(&net, addrs, token, err, sizeof err) == FGB_OK);
  char *colon = strrchr(addr, ':');
  FZ_CHECK(colon && uv_ip4_addr("127.0.0.1", atoi(colon + 1), &leader) == 0);
  const char *dir = getenv("FGB_FUZZ_SEEDS");
  if (dir) {
    write_seeds(dir);
    exit(0);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Each connection leaves a TIME_WAIT behind (ours: we close first): a long run would use up the
   * ephemeral ports of one address pair, so the source address cycles through 127.1.0.0/20. */
  static uint32_t conns;
  struct sockaddr_in src = {.sin_family = AF_INET};
  src.sin_addr.s_addr = htonl(0x7f010000u | (conns++ & 0xfffu));
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  FZ_CHECK(s >= 0 && bind(s, (struct sockaddr *)&src, sizeof src) == 0);
  /* Non-blocking connect, then wait for it: libFuzzer's SIGALRM (its -timeout watchdog) can land
   * in a blocking connect(), which then fails with EINTR while the handshake goes on (seen once in
   * CI). poll() is simply called again. */
  int cerr = connect(s, (struct sockaddr *)&leader, sizeof leader) == 0 ? 0 : errno;
  if (cerr == EINPROGRESS || cerr == EINTR) {
    struct pollfd pfd = {.fd = s, .events = POLLOUT};
    int pr;
    while ((pr = poll(&pfd, 1, 10000)) < 0 && errno == EINTR) continue;
    socklen_t el = sizeof cerr;
    cerr = pr == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &cerr, &el) == 0 ? cerr : ETIMEDOUT;
  }
  if (cerr) {
    fprintf(stderr, "connect from 127.1.%u.%u: %s\n", (conns - 1) >> 8 & 15, (conns - 1) & 255,
            strerror(cerr));
    abort();
  }
  size_t off = 0;
  int wdone = 0, rdone = 0;
  uint64_t t0 = clock_ms();
  while (!rdone) {
    FZ_CHECK(clock_ms() - t0 < 10000); /* the leader must close a connection that closed */
    if (!wdone) {
      ssize_t n = off < size ? send(s, data + off, size - off, MSG_NOSIGNAL) : 0;
      if (n > 0) off += (size_t)n;
      if (off == size || (n < 0 && errno != EAGAIN)) {
        shutdown(s, SHUT_WR);
        wdone = 1;
      }
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    uint8_t buf[4096];
    ssize_t r = recv(s, buf, sizeof buf, 0); /* frames the leader forwards back to rank 1 */
    if (r == 0 || (r < 0 && errno != EAGAIN)) rdone = 1;
  }
  close(s);
  for (int i = 0; i < 4; i++) uv_run(&loop, UV_RUN_NOWAIT); /* the closed handles are freed */
  return 0;
}
