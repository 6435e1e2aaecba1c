/* daemon/net/prehello.h — which control-plane connection without a hello gives up its slot
 * (ctrl_listen.c). A daemon of the world sends its hello the moment it connects and needs its slot
 * for one round trip; a stranger's connection has no use for one. So a new connection is never
 * refused: when its source address holds its allowance, the oldest waiting connection of that
 * address is closed; when every slot is taken, the oldest waiting connection of the address holding
 * the most slots is closed, addresses no daemon of the world advertises first. Pure: no libuv,
 * no sockets. */
#ifndef FGB_SRV_PREHELLO_H
#define FGB_SRV_PREHELLO_H

#include <stdint.h>

/* One connection without a hello, as the leader sees it. */
typedef struct ph_slot {
  uint32_t ip; /* IPv4 source address, network order; 0: unknown (never counted per address) */
  uint64_t since_ms; /* when it was accepted */
  int world;         /* a daemon of the world advertises this address */
} ph_slot;

typedef enum ph_cause {
  PH_KEEP = 0, /* every connection fits */
  PH_ADDR,     /* the newcomer's address holds its allowance: its own oldest goes */
  PH_TOTAL,    /* every slot is taken: the oldest of the address holding the most goes */
} ph_cause;

/* s[0..n-2]: the connections already waiting, in the order they were accepted (the first of two
 * accepted within the same ms is the older); s[n-1]: the newcomer (never chosen). allowance: how
 * many the newcomer's address may hold; total_max: how many may wait in all. Returns the index of
 * the connection to close and sets *cause (and *held, the slots its address held), or -1 with
 * PH_KEEP. O(n^2), n is at most total_max + 1. */
int ph_choose(const ph_slot *s, int n, int allowance, int total_max, ph_cause *cause, int *held);

#endif
