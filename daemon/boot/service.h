/* daemon/boot/service.h — what fgbuffd needs to run as a node service (systemd, Slurm): the
 * sd_notify datagram (READY/STATUS/WATCHDOG, no libsystemd) and the world-formation deadline with a
 * message that names address problems (net/ctrl.h's ctrl_leader_hint). The lock per socket, so two
 * daemons of one index never both serve, is net/server.c's. */
#ifndef FGB_BOOT_SERVICE_H
#define FGB_BOOT_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#ifndef FGBUFF_VERSION
#define FGBUFF_VERSION "unknown"
#endif

struct srv;

/* Send one sd_notify datagram (e.g. "READY=1\nSTATUS=...") to $NOTIFY_SOCKET (a path, or '@' for
 * the abstract namespace). Returns 1 sent, 0 no $NOTIFY_SOCKET, -1 error (logged once). */
int service_notify(const char *msg);

/* How often to send WATCHDOG=1, in ms: half of $WATCHDOG_USEC when it is set and $WATCHDOG_PID is
 * unset, our pid or our parent's (mpirun as the unit's main process); 0 = no watchdog. */
uint64_t service_notify_watchdog_ms(void);

/* Explain why a world did not form: names the leader's advertised control-plane address and says
 * when it is a loopback one that peers on other hosts cannot reach. */
void service_form_explain(const char *leader_addr, int world_rank, int world_size,
                          uint64_t waited_ms, char *out, size_t outlen);

/* Called from the loop's 100 ms tick with formed = ctrl_ready (the world complete now): once
 * the world formed, READY=1 and a STATUS= line (saying so when a peer was lost since), the STATUS
 * again when it changes, WATCHDOG=1 at the watchdog interval; before it first formed, the
 * formation deadline (the daemon exits 1 with service_form_explain's message). leader_addr: the
 * leader's advertised control-plane address. With FGBUFF_NOTIFY=leader (base/env) only world rank 0
 * sends READY/STATUS (a unit running the whole world: its READY means every daemon connected). */
void service_tick(struct srv *d, int formed, const char *leader_addr);

/* --cp-addr if:NAME (as NCCL_SOCKET_IFNAME): replace it with the first IPv4 address of interface
 * NAME. Other values are left alone. Returns 0, or -1 with err naming the interface. */
int service_cp_addr_resolve(char *cp_addr, size_t len, char *err, size_t errlen);

#endif
