/* daemon/base/htab.h — a hash table of pointers: open addressing, linear probing, deletion by
 * backward shift (no tombstones), power-of-two capacity kept at most half full. The caller hashes
 * its key and says how to compare a stored pointer with it; each slot keeps the hash beside the
 * pointer, so growing and deleting never call back. Lookups, inserts and deletes cost O(1)
 * expected; growing rehashes once per doubling. Not thread-safe (one owner). */
#ifndef FGB_BASE_HTAB_H
#define FGB_BASE_HTAB_H

#include <stdint.h>

typedef struct htab_slot {
  uint64_t hash;
  void *val; /* NULL: empty */
} htab_slot;

/* Zero-initialised is an empty table; htab_free gives its memory back. */
typedef struct htab {
  htab_slot *slots;
  uint32_t cap, n;
} htab;

/* 1 when the stored pointer val is the one key names. */
typedef int (*htab_eq)(const void *val, const void *key);

/* FNV-1a of a NUL-terminated string, and a 64-bit integer mix (splitmix64's finaliser). */
uint64_t htab_hash_str(const char *s);
uint64_t htab_hash_u64(uint64_t x);

/* The stored pointer with this hash for which eq(val, key) holds, or NULL. */
void *htab_find(const htab *h, uint64_t hash, htab_eq eq, const void *key);
/* Store val (not NULL) under hash; the caller checked that no equal entry is stored.
 * 0, or -1 when out of memory (the table is unchanged). */
int htab_put(htab *h, uint64_t hash, void *val);
/* Remove the slot holding exactly val (stored under hash): 1 removed, 0 not found. */
int htab_del(htab *h, uint64_t hash, const void *val);
void htab_free(htab *h);

#endif
