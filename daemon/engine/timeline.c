/* daemon/engine/timeline.c — the bounded span recorder (see timeline.h). One recording at a time
 * per daemon: a fixed array of spans, filled in order and never overwritten (stop-when-full), and
 * a string table of the names the spans point to. */
#include "timeline.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

atomic_int tl_recording;

/* The string table: a fixed array of ids (never moved, so readers need no lock) and an
 * open-addressing hash of twice its size. */
#define TL_HASH (2 * TL_MAX_STRINGS)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  tl_span *v;
  uint32_t cap, gen;
  uint64_t n, dropped; /* under mu */
  uint64_t started_us, stopped_us;
  char **strs; /* [0] = "" */
  uint32_t nstrs;
  uint32_t *hash; /* ids, 0 empty */
} R;

const char *tl_phase_name(int phase) {
  static const char *const names[TL_NPHASES] = {"wait", "compress", "communicate", "decompress",
                                                "write-back"};
  return phase >= 0 && phase < TL_NPHASES ? names[phase] : "?";
}

static void free_strings(char **strs, uint32_t n) {
  for (uint32_t i = 1; strs && i < n; i++) free(strs[i]);
  free(strs);
}

fgb_status tl_start(uint32_t capacity, char *err, size_t errlen) {
  if (capacity < 1 || capacity > TL_MAX_CAPACITY) {
    snprintf(err, errlen, "capacity %u spans is outside 1..%u", capacity, TL_MAX_CAPACITY);
    return FGB_EINVAL;
  }
  tl_span *v = malloc((size_t)capacity * sizeof(*v));
  char **strs = calloc(TL_MAX_STRINGS, sizeof(*strs));
  uint32_t *hash = calloc(TL_HASH, sizeof(*hash));
  if (!v || !strs || !hash) {
    free(v);
    free(strs);
    free(hash);
    snprintf(err, errlen, "out of memory for %u spans (%zu bytes)", capacity,
             (size_t)capacity * sizeof(*v));
    return FGB_ENOMEM;
  }
  strs[0] = "";
  pthread_mutex_lock(&mu);
  tl_span *old = R.v;
  char **old_strs = R.strs;
  uint32_t old_n = R.nstrs;
  uint32_t *old_hash = R.hash;
  R.v = v;
  R.cap = capacity;
  R.gen++;
  if (R.gen == 0) R.gen = 1; /* 0 means "not labelled" */
  R.n = R.dropped = 0;
  R.started_us = clock_us();
  R.stopped_us = 0;
  R.strs = strs;
  R.nstrs = 1;
  R.hash = hash;
  atomic_store_explicit(&tl_recording, 1, memory_order_relaxed);
  pthread_mutex_unlock(&mu);
  free(old);
  if (old_strs) old_strs[0] = NULL;
  free_strings(old_strs, old_n);
  free(old_hash);
  return FGB_OK;
}

void tl_stop(void) {
  pthread_mutex_lock(&mu);
  if (atomic_load_explicit(&tl_recording, memory_order_relaxed)) R.stopped_us = clock_us();
  atomic_store_explicit(&tl_recording, 0, memory_order_relaxed);
  pthread_mutex_unlock(&mu);
}

tl_stats tl_get_stats(void) {
  pthread_mutex_lock(&mu);
  tl_stats s = {atomic_load_explicit(&tl_recording, memory_order_relaxed),
                R.cap,
                R.gen,
                R.n,
                R.dropped,
                R.started_us,
                R.stopped_us};
  pthread_mutex_unlock(&mu);
  return s;
}

void tl_label_init(tl_label *l) {
  memset(l, 0, sizeof(*l));
  if (tl_on()) l->gen = R.gen; /* the loop thread changes gen: no race with itself */
}

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

uint32_t tl_intern(const char *s) {
  if (!s || !*s || !tl_on() || !R.hash) return 0;
  uint32_t h = fnv1a(s) % TL_HASH;
  for (;; h = (h + 1) % TL_HASH) {
    uint32_t id = R.hash[h];
    if (id == 0) break;
    if (strcmp(R.strs[id], s) == 0) return id;
  }
  if (R.nstrs >= TL_MAX_STRINGS) return 0;
  char *d = strdup(s);
  if (!d) return 0;
  pthread_mutex_lock(&mu); /* readers of other threads see the string before its id */
  uint32_t id = R.nstrs;
  R.strs[id] = d;
  R.nstrs++;
  pthread_mutex_unlock(&mu);
  R.hash[h] = id;
  return id;
}

const char *tl_str(uint32_t gen, uint32_t id) {
  if (gen != R.gen || !R.strs || id >= R.nstrs) return "";
  return R.strs[id];
}

void tl_add(const tl_label *l, const tl_span *s) {
  if (!l || !l->gen || !tl_on()) return;
  pthread_mutex_lock(&mu);
  if (l->gen == R.gen && atomic_load_explicit(&tl_recording, memory_order_relaxed)) {
    if (R.n < R.cap) {
      tl_span *d = &R.v[R.n++];
      *d = *s;
      d->job = l->job;
      d->policy = l->policy;
      if (!d->name) {
        d->name = l->first;
        d->ntensors = l->ntensors;
      }
    } else {
      R.dropped++;
    }
  }
  pthread_mutex_unlock(&mu);
}

const tl_span *tl_spans(uint64_t *n, uint32_t *gen) {
  pthread_mutex_lock(&mu);
  *n = R.n;
  *gen = R.gen;
  const tl_span *v = R.v;
  pthread_mutex_unlock(&mu);
  return v;
}
