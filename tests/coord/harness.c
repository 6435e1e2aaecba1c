/* tests/coord/harness.c — in-memory router for coordinator tests (see harness.h). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* test.h's CHECK counts into a per-file static; the harness only needs hard stops. */
#define REQUIRE(cond)                                                                    \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: harness REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

void h_init(harness *h, int n, uint64_t seed, uint64_t stall_ms, uint32_t fusion_bytes) {
  memset(h, 0, sizeof *h);
  REQUIRE(n > 0 && n <= H_MAX);
  h->n = n;
  h->rng = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int d = 0; d < n; d++) {
    coord_config cfg = {d, n, stall_ms, fusion_bytes, 0};
    h->c[d] = coord_new(&cfg);
    REQUIRE(h->c[d]);
  }
}

void h_free(harness *h) {
  for (int d = 0; d < h->n; d++) {
    coord_free(h->c[d]);
    for (size_t i = 0; i < h->nlog[d]; i++) coord_event_free(&h->log[d][i]);
    free(h->log[d]);
    for (int e = 0; e < h->n; e++) {
      h_fifo *f = &h->link[d][e];
      for (size_t i = 0; i < f->len; i++) free(f->m[(f->head + i) % f->cap].bytes);
      free(f->m);
    }
  }
}

uint64_t h_rand(harness *h) {
  uint64_t x = (h->rng += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void fifo_push(h_fifo *f, h_msg m) {
  if (f->len == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8;
    h_msg *a = malloc(cap * sizeof *a);
    REQUIRE(a);
    for (size_t i = 0; i < f->len; i++) a[i] = f->m[(f->head + i) % f->cap];
    free(f->m);
    f->m = a;
    f->cap = cap;
    f->head = 0;
  }
  f->m[(f->head + f->len) % f->cap] = m;
  f->len++;
}

void h_drain(harness *h, int d) {
  coord_event ev;
  while (coord_next_event(h->c[d], &ev)) {
    if (ev.kind == COORD_EV_SEND) {
      REQUIRE(ev.peer >= 0 && ev.peer < h->n);
      REQUIRE(ev.peer != d); /* never a SEND to oneself */
      if (h->dead[ev.peer]) {
        coord_event_free(&ev);
        continue;
      }
      h_msg m = {ev.bytes, ev.len};
      ev.bytes = NULL;
      fifo_push(&h->link[d][ev.peer], m);
      coord_event_free(&ev);
      continue;
    }
    if (h->nlog[d] == h->caplog[d]) {
      h->caplog[d] = h->caplog[d] ? h->caplog[d] * 2 : 32;
      h->log[d] = realloc(h->log[d], h->caplog[d] * sizeof *h->log[d]);
      REQUIRE(h->log[d]);
    }
    h->log[d][h->nlog[d]++] = ev;
  }
}

int h_step(harness *h) {
  for (int d = 0; d < h->n; d++)
    if (!h->dead[d]) h_drain(h, d);
  int nonempty = 0;
  for (int s = 0; s < h->n; s++)
    for (int d = 0; d < h->n; d++) nonempty += h->link[s][d].len > 0;
  if (!nonempty) return 0;
  int pick = (int)(h_rand(h) % (uint64_t)nonempty);
  for (int s = 0; s < h->n; s++) {
    for (int d = 0; d < h->n; d++) {
      h_fifo *f = &h->link[s][d];
      if (f->len == 0 || pick-- != 0) continue;
      h_msg m = f->m[f->head];
      f->head = (f->head + 1) % f->cap;
      f->len--;
      char err[256] = "";
      fgb_status st = coord_on_message(h->c[d], s, m.bytes, m.len, err, sizeof err);
      free(m.bytes);
      if (st == FGB_EPROTO) {
        fprintf(stderr, "harness: link %d->%d: FGB_EPROTO: %s\n", s, d, err);
        h->nproto++;
      } else if (st) {
        h->nerrors++;
        snprintf(h->last_err, sizeof h->last_err, "%s", err);
      }
      h_drain(h, d);
      return 1;
    }
  }
  return 0;
}

int h_deliver(harness *h, int src, int dst) {
  for (int d = 0; d < h->n; d++)
    if (!h->dead[d]) h_drain(h, d);
  h_fifo *f = &h->link[src][dst];
  if (f->len == 0) return 0;
  h_msg m = f->m[f->head];
  f->head = (f->head + 1) % f->cap;
  f->len--;
  char err[256] = "";
  fgb_status st = coord_on_message(h->c[dst], src, m.bytes, m.len, err, sizeof err);
  free(m.bytes);
  if (st == FGB_EPROTO) {
    fprintf(stderr, "harness: link %d->%d: FGB_EPROTO: %s\n", src, dst, err);
    h->nproto++;
  } else if (st) {
    h->nerrors++;
    snprintf(h->last_err, sizeof h->last_err, "%s", err);
  }
  h_drain(h, dst);
  return 1;
}

void h_run(harness *h) {
  while (h_step(h)) {
  }
}

void h_kill(harness *h, int d) {
  h_drain(h, d);
  h->dead[d] = 1;
  for (int e = 0; e < h->n; e++) {
    h_fifo *fs[2] = {&h->link[d][e], &h->link[e][d]};
    for (int k = 0; k < 2; k++) {
      for (size_t i = 0; i < fs[k]->len; i++) free(fs[k]->m[(fs[k]->head + i) % fs[k]->cap].bytes);
      fs[k]->len = 0;
    }
  }
  for (int e = 0; e < h->n; e++)
    if (!h->dead[e]) coord_peer_lost(h->c[e], d);
}

int h_count(const harness *h, int d, coord_event_kind k) {
  int n = 0;
  for (size_t i = 0; i < h->nlog[d]; i++) n += h->log[d][i].kind == k;
  return n;
}

const coord_event *h_nth(const harness *h, int d, coord_event_kind k, int nth) {
  for (size_t i = 0; i < h->nlog[d]; i++)
    if (h->log[d][i].kind == k && nth-- == 0) return &h->log[d][i];
  return NULL;
}

coord_job_id h_job(const char *name, uint64_t incarnation) {
  coord_job_id j;
  memset(&j, 0, sizeof j);
  snprintf(j.name, sizeof j.name, "%s", name);
  j.incarnation = incarnation;
  return j;
}

void h_form_per_tensor(harness *h, const coord_job_id *job, const int *wr, int nranks, int nt) {
  REQUIRE(nt >= 1 && nt <= 26);
  for (int r = 0; r < nranks; r++) REQUIRE(coord_join(h->c[wr[r]], job, r, nranks) == FGB_OK);
  for (int r = 0; r < nranks; r++)
    for (int t = 0; t < nt; t++) {
      char name[2] = {(char)('a' + t), 0};
      coord_tensor_meta m = h_meta(name, 4, FGB_FLOAT32);
      m.bytes = 1ull << 62; /* above any fusion threshold: one tensor per ISSUE */
      REQUIRE(coord_register(h->c[wr[r]], job, &m) == FGB_OK);
    }
  h_run(h);
}

coord_tensor_meta h_meta(const char *name, uint64_t count, fgb_dtype dt) {
  coord_tensor_meta m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "%s", name);
  m.count = count;
  m.dtype = dt;
  m.ndim = 1;
  m.shape[0] = count;
  m.bytes = count * 4;
  return m;
}
