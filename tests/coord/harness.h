/* tests/coord/harness.h — N coordinator instances wired in memory: SEND events go into one FIFO
 * per (src, dst) pair and are delivered to coord_on_message; which pair goes next is drawn from a
 * seeded PRNG, so interleavings between pairs vary while each link stays in order. Other events
 * are kept in a per-daemon log for the test to inspect.
 */
#ifndef FGB_COORD_HARNESS_H
#define FGB_COORD_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator.h"

#define H_MAX 72

typedef struct h_msg {
  uint8_t *bytes;
  size_t len;
} h_msg;

typedef struct h_fifo {
  h_msg *m;
  size_t head, len, cap;
} h_fifo;

typedef struct harness {
  int n;
  coord *c[H_MAX];
  int dead[H_MAX];           /* lost daemons: not driven, messages to them dropped */
  h_fifo link[H_MAX][H_MAX]; /* [src][dst] */
  coord_event *log[H_MAX];   /* non-SEND events, in order popped */
  size_t nlog[H_MAX], caplog[H_MAX];
  uint64_t rng;
  int nerrors; /* coord_on_message returned non-zero (other than FGB_EPROTO) */
  int nproto;  /* coord_on_message returned FGB_EPROTO: a bug, since only valid bytes travel */
  char last_err[512];
} harness;

void h_init(harness *h, int n, uint64_t seed, uint64_t stall_ms, uint32_t fusion_bytes);
void h_free(harness *h);
uint64_t h_rand(harness *h);
/* Moves daemon d's pending events into its links and log. */
void h_drain(harness *h, int d);
/* Drains everything, then delivers one message from a random non-empty link: 1, or 0 if none. */
int h_step(harness *h);
/* Delivers the oldest message on link src->dst (after draining): 1, or 0 if the link is empty. */
int h_deliver(harness *h, int src, int dst);
/* Runs until no message is in flight. */
void h_run(harness *h);
/* Marks d lost: its links are dropped and every other daemon gets coord_peer_lost(d). */
void h_kill(harness *h, int d);
/* Number of logged events of a kind on daemon d, and the nth (0-based) of them. */
int h_count(const harness *h, int d, coord_event_kind k);
const coord_event *h_nth(const harness *h, int d, coord_event_kind k, int nth);
coord_job_id h_job(const char *name, uint64_t incarnation);
coord_tensor_meta h_meta(const char *name, uint64_t count, fgb_dtype dt);
/* Joins `job` with nranks ranks (rank r on world rank wr[r]), each registering nt fp32[4] tensors
 * "a", "b", ... (nt <= 26) sized so that every tensor is its own ISSUE (no fusion), and runs the
 * world until quiet: the setting of the pre-issue and recall tests. */
void h_form_per_tensor(harness *h, const coord_job_id *job, const int *wr, int nranks, int nt);

#endif
