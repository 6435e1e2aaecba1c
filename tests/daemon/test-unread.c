/* tests/daemon/test-unread.c — clients that leave their replies unread and then send garbage must
 * not freeze the daemon's loop (issue 15: each fatal Error used to be flushed for up to 200 ms on
 * the loop thread, 40 such clients froze every job for 8 s). 40 connections each queue Status
 * replies they never read (filling their socket), then send a frame header announcing 4 GiB;
 * meanwhile a prober makes Status round trips on its own connection, each of which must answer
 * within 1 s, and every hostile connection must be closed by the daemon. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fgbuff/client.h"
#include "rawclient.h"
#include "test.h"

#define NCONN 40
#define NSTATUS 400 /* per connection: more reply bytes than a Unix socket buffers */

typedef Fgbuff__V1__Envelope Env;
static char sock[512];
static atomic_int stop_probe;
static long long probe_max_ms, probe_n, probe_fail;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* job: list only that job (NULL: every job). */
static void send_status_of(raw *r, const char *job) {
  Fgbuff__V1__StatusRequest sr = FGBUFF__V1__STATUS_REQUEST__INIT;
  if (job) sr.job = (char *)job;
  Env env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS;
  env.status = &sr;
  raw_send(r, &env, NULL, 0);
}

static void send_status(raw *r) {
  send_status_of(r, NULL);
}

/* A job name no job has: a Status reply that lists no job, so its size does not change when the
 * bystander job ends during the loop (its entry made the first reply larger than the later ones:
 * the estimate below then counted 22 MiB where the daemon had queued 8). */
#define NO_JOB "test-unread-no-such-job"

static void *prober(void *arg) {
  (void)arg;
  raw r;
  if (raw_connect(&r, sock) != 0 || raw_hello(&r) != 0) {
    probe_fail++;
    return NULL;
  }
  while (!atomic_load(&stop_probe)) {
    long long t0 = now_ms();
    send_status(&r);
    Env *e = raw_recv(&r, 20000);
    long long dt = now_ms() - t0;
    if (!e || e->body_case != FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY) probe_fail++;
    raw_free(e);
    if (dt > probe_max_ms) probe_max_ms = dt;
    probe_n++;
    usleep(10000);
  }
  raw_close(&r);
  return NULL;
}

int main(void) {
  const char *dir = getenv("FGBUFF_RUNTIME_DIR");
  REQUIRE(dir != NULL);
  snprintf(sock, sizeof(sock), "%s/cpu0.sock", dir);
  static raw h[NCONN];
  for (int i = 0; i < NCONN; i++) {
    REQUIRE(raw_connect(&h[i], sock) == 0);
    REQUIRE(raw_hello(&h[i]) == 0);
    for (int k = 0; k < NSTATUS; k++) send_status(&h[i]);
  }
  /* Let the daemon answer them all (into sockets nobody reads). */
  sleep(1);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, prober, NULL) == 0);
  usleep(200000);
  long long t0 = now_ms();
  static const uint8_t garbage[4] = {0xff, 0xff, 0xff, 0xff}; /* a 4 GiB frame: fatal */
  for (int i = 0; i < NCONN; i++) CHECK(raw_send_bytes(&h[i], garbage, sizeof(garbage)) == 0);
  int closed = 0;
  for (int i = 0; i < NCONN; i++) closed += raw_wait_hangup(&h[i], 10000);
  long long dt = now_ms() - t0;
  usleep(500000);
  atomic_store(&stop_probe, 1);
  pthread_join(th, NULL);
  printf(
      "%d of %d unread connections closed in %lld ms; prober: %lld status calls, slowest %lld "
      "ms, %lld failed\n",
      closed, NCONN, dt, probe_n, probe_max_ms, probe_fail);
  CHECK_MSG(closed == NCONN, "%d of %d hostile connections still open", NCONN - closed, NCONN);
  CHECK_MSG(probe_fail == 0, "%lld status calls failed", probe_fail);
  CHECK_MSG(probe_n >= 5, "only %lld status calls", probe_n);
  CHECK_MSG(probe_max_ms < 1000, "a status call took %lld ms: the loop was blocked", probe_max_ms);
  for (int i = 0; i < NCONN; i++) raw_close(&h[i]);

  /* A client that only sends and never reads is closed once its queued replies pass the cap
   * (SERVER_OUT_MAX); the daemon logs that once (test-unread.sh counts the lines). */
  raw f;
  REQUIRE(raw_connect(&f, sock) == 0);
  REQUIRE(raw_hello(&f) == 0);
  /* One reply's size, to bound what the daemon queued for it (the same for every request: no job
   * listed). */
  send_status_of(&f, NO_JOB);
  Env *e = raw_recv(&f, 30000);
  REQUIRE(e && e->body_case == FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY);
  size_t reply = fgbuff__v1__envelope__get_packed_size(e) + 4;
  raw_free(e);
  int sent = 0, gone = 0;
  t0 = now_ms();
  while (!gone && sent < 200000 && now_ms() - t0 < 60000) {
    send_status_of(&f, NO_JOB);
    sent++;
    if (sent % 256 == 0) {
      struct pollfd pf = {f.fd, POLLRDHUP, 0};
      gone = poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
    }
  }
  if (!gone) gone = raw_wait_hangup(&f, 15000);
  printf("a client that never reads: %s after %d Status requests (%lld ms)\n",
         gone ? "closed" : "NOT closed", sent, now_ms() - t0);
  CHECK_MSG(gone, "a client that never reads was not closed after %d requests", sent);
  /* The cap is 8 MiB; requests still in the socket when it closed add up to a few MiB more. */
  double mib = (double)sent * (double)reply / (1 << 20);
  printf("  %.1f MiB of replies asked for (%zu bytes each)\n", mib, reply);
  CHECK_MSG(mib < 16, "%.1f MiB of replies were queued before the daemon closed the client", mib);
  raw_close(&f);
  TEST_DONE();
}
