/* daemon/base/htab.c — the open-addressing pointer table (see htab.h). */
#include "htab.h"

#include <stdlib.h>

uint64_t htab_hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

uint64_t htab_hash_u64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void *htab_find(const htab *h, uint64_t hash, htab_eq eq, const void *key) {
  if (!h->cap) return NULL;
  uint32_t mask = h->cap - 1;
  for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
    const htab_slot *s = &h->slots[i];
    if (!s->val) return NULL;
    if (s->hash == hash && eq(s->val, key)) return s->val;
  }
}

static void place(htab_slot *slots, uint32_t mask, uint64_t hash, void *val) {
  uint32_t i = (uint32_t)hash & mask;
  while (slots[i].val) i = (i + 1) & mask;
  slots[i].hash = hash;
  slots[i].val = val;
}

int htab_put(htab *h, uint64_t hash, void *val) {
  if ((uint64_t)(h->n + 1) * 2 > h->cap) {
    uint64_t cap = h->cap ? (uint64_t)h->cap * 2 : 16;
    if (cap > (1u << 31)) return -1;
    htab_slot *ns = calloc((size_t)cap, sizeof(*ns));
    if (!ns) return -1;
    for (uint32_t i = 0; i < h->cap; i++)
      if (h->slots[i].val) place(ns, (uint32_t)cap - 1, h->slots[i].hash, h->slots[i].val);
    free(h->slots);
    h->slots = ns;
    h->cap = (uint32_t)cap;
  }
  place(h->slots, h->cap - 1, hash, val);
  h->n++;
  return 0;
}

int htab_del(htab *h, uint64_t hash, const void *val) {
  if (!h->cap) return 0;
  uint32_t mask = h->cap - 1, i = (uint32_t)hash & mask;
  while (h->slots[i].val != val) {
    if (!h->slots[i].val) return 0;
    i = (i + 1) & mask;
  }
  /* Backward shift: move later members of the probe run into the hole when their home slot does
   * not lie (cyclically) between the hole and them. */
  for (uint32_t j = (i + 1) & mask; h->slots[j].val; j = (j + 1) & mask) {
    uint32_t home = (uint32_t)h->slots[j].hash & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      h->slots[i] = h->slots[j];
      i = j;
    }
  }
  h->slots[i].val = NULL;
  h->slots[i].hash = 0;
  h->n--;
  return 1;
}

void htab_free(htab *h) {
  free(h->slots);
  h->slots = NULL;
  h->cap = h->n = 0;
}
