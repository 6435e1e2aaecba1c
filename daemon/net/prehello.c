/* daemon/net/prehello.c — the slot policy for control-plane connections without a hello (see
 * prehello.h): a newcomer always gets a slot, the oldest idle stranger pays for it. */
#include "prehello.h"

#include <stddef.h>

/* Connections of s[0..n-1] from ip. */
static int held_by(const ph_slot *s, int n, uint32_t ip) {
  int k = 0;
  for (int i = 0; i < n; i++) k += s[i].ip == ip;
  return k;
}

/* 1 when a is to be closed before b (a comes later in accept order): an address no daemon
 * advertises before one that a daemon does, then the address holding more slots, then the older
 * connection. */
static int before(const ph_slot *a, int ha, const ph_slot *b, int hb) {
  if (a->world != b->world) return !a->world;
  if (ha != hb) return ha > hb;
  return a->since_ms < b->since_ms;
}

int ph_choose(const ph_slot *s, int n, int allowance, int total_max, ph_cause *cause, int *held) {
  *cause = PH_KEEP;
  *held = 0;
  if (n < 2) return -1; /* only the newcomer waits */
  const ph_slot *nc = &s[n - 1];
  int v = -1;
  if (nc->ip && held_by(s, n - 1, nc->ip) >= allowance) {
    for (int i = 0; i < n - 1; i++)
      if (s[i].ip == nc->ip && (v < 0 || s[i].since_ms < s[v].since_ms)) v = i;
    *cause = PH_ADDR;
    *held = held_by(s, n, nc->ip);
    return v;
  }
  if (n <= total_max) return -1;
  int hv = 0;
  for (int i = 0; i < n - 1; i++) {
    int h = s[i].ip ? held_by(s, n, s[i].ip) : 1; /* unknown addresses count one each */
    if (v < 0 || before(&s[i], h, &s[v], hv)) v = i, hv = h;
  }
  *cause = PH_TOTAL;
  *held = hv;
  return v;
}
