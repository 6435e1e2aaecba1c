/* test-timeline: the span recorder (daemon/engine/timeline.c) on its own. Off, nothing is kept
 * and strings do not intern; a recording keeps exactly its capacity and counts the rest as
 * dropped (stop-when-full: the first spans stay, in order); spans of an older recording's label
 * are ignored; stop keeps the spans; a restart clears them. Then a writer thread adds spans while
 * this (the loop) thread reads the published prefix: every span it sees is complete (its fields
 * agree with its index), the count only grows, and kept + dropped equals what was added. */
#include <pthread.h>
#include <stdint.h>

#include "../test.h"
#include "timeline.h"

#define NWRITE 200000u
#define CAP 150000u

static tl_span span_of(uint64_t i) {
  tl_span s = {.ts_us = 1000 + i,
               .dur_us = i % 7,
               .step = i,
               .bytes = i * 3,
               .seq = i ^ 0x5a5a,
               .phase = (uint8_t)(i % TL_NPHASES)};
  return s;
}

static tl_label g_label;

static void *writer(void *arg) {
  (void)arg;
  for (uint64_t i = 0; i < NWRITE; i++) {
    tl_span s = span_of(i);
    tl_add(&g_label, &s);
  }
  return NULL;
}

int main(void) {
  char err[256];
  uint64_t n = 0;
  uint32_t gen = 0;
  tl_label l;
  /* Off: no label, no strings, no spans, nothing to dump. */
  tl_label_init(&l);
  CHECK(l.gen == 0 && !tl_on());
  CHECK(tl_intern("x") == 0);
  CHECK(tl_spans(&n, &gen) == NULL);
  CHECK(tl_start(0, err, sizeof(err)) == FGB_EINVAL);
  CHECK(tl_start(TL_MAX_CAPACITY + 1, err, sizeof(err)) == FGB_EINVAL);

  /* Full: the first 5 of 8 kept, 3 dropped. */
  CHECK(tl_start(5, err, sizeof(err)) == FGB_OK && tl_on());
  tl_label_init(&l);
  CHECK(l.gen != 0);
  l.job = tl_intern("job-a");
  l.first = tl_intern("fc1.weight");
  l.ntensors = 3;
  CHECK(l.job && l.first && l.job != l.first && tl_intern("job-a") == l.job);
  for (uint64_t i = 0; i < 8; i++) {
    tl_span s = span_of(i);
    tl_add(&l, &s);
  }
  tl_stats st = tl_get_stats();
  CHECK(st.recording && st.capacity == 5 && st.spans == 5 && st.dropped == 3);
  const tl_span *v = tl_spans(&n, &gen);
  CHECK(v && n == 5 && gen == l.gen);
  for (uint64_t i = 0; v && i < n; i++) {
    CHECK(v[i].step == i && v[i].ts_us == 1000 + i);
    CHECK(v[i].job == l.job && v[i].name == l.first && v[i].ntensors == 3);
  }
  CHECK(strcmp(tl_str(gen, l.job), "job-a") == 0 && strcmp(tl_str(gen, 999), "") == 0);

  /* Stop keeps them; an added span is ignored; a restart clears and ignores old labels. */
  tl_stop();
  tl_span s9 = span_of(9);
  tl_add(&l, &s9);
  st = tl_get_stats();
  CHECK(!st.recording && st.spans == 5 && st.dropped == 3 && st.stopped_us >= st.started_us);
  CHECK(tl_spans(&n, &gen) && n == 5);
  CHECK(tl_start(4, err, sizeof(err)) == FGB_OK);
  tl_add(&l, &s9); /* the old recording's label */
  st = tl_get_stats();
  CHECK(st.spans == 0 && st.dropped == 0 && st.gen != l.gen);
  CHECK(strcmp(tl_str(st.gen, l.job), "") == 0); /* ids are per recording */

  /* A writer thread against this reader. */
  CHECK(tl_start(CAP, err, sizeof(err)) == FGB_OK);
  tl_label_init(&g_label);
  g_label.job = tl_intern("job-b");
  pthread_t th;
  CHECK(pthread_create(&th, NULL, writer, NULL) == 0);
  uint64_t last = 0, reads = 0;
  int bad = 0;
  for (;;) {
    v = tl_spans(&n, &gen);
    CHECK_MSG(n >= last, "count went back from %llu to %llu", (unsigned long long)last,
              (unsigned long long)n);
    for (uint64_t i = last; v && i < n && !bad; i++) {
      tl_span e = span_of(i);
      if (v[i].ts_us != e.ts_us || v[i].step != i || v[i].bytes != e.bytes || v[i].seq != e.seq ||
          v[i].job != g_label.job)
        bad = 1;
    }
    CHECK_MSG(!bad, "a torn or misplaced span below the published count %llu",
              (unsigned long long)n);
    last = n;
    reads++;
    st = tl_get_stats();
    if (st.spans + st.dropped == NWRITE || bad) break;
  }
  pthread_join(th, NULL);
  st = tl_get_stats();
  CHECK(st.spans == CAP && st.dropped == NWRITE - CAP);
  printf("test-timeline: %llu reads while writing, %llu kept, %llu dropped\n",
         (unsigned long long)reads, (unsigned long long)st.spans, (unsigned long long)st.dropped);
  tl_stop();
  return test_failures_ ? 1 : 0;
}
