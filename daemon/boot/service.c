/* daemon/boot/service.c — fgbuffd as a node service (see service.h): the sd_notify protocol is one
 * datagram on an AF_UNIX socket, so no libsystemd. */
#include "service.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "ctrl.h"
#include "daemon.h"
#include "env.h"
#include "fgbuff/client.h"
#include "log.h"

int service_notify(const char *msg) {
  static int warned;
  const char *path = getenv("NOTIFY_SOCKET");
  if (!path || !*path) return 0;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path)) {
    if (!warned++) LOG_WARN("NOTIFY_SOCKET '%.100s': not a socket path; not notifying", path);
    return -1;
  }
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@') sa.sun_path[0] = 0; /* abstract: the name is not NUL-terminated */
  socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ssize_t w = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
  int e = errno;
  close(fd);
  if (w < 0) {
    if (!warned++) LOG_WARN("sd_notify to %.100s: %s", path, strerror(e));
    return -1;
  }
  return 1;
}

uint64_t service_notify_watchdog_ms(void) {
  const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
  if (!us || !*us) return 0;
  char *end;
  unsigned long long v = strtoull(us, &end, 10);
  if (*end || v < 2000) return 0;
  if (pid && *pid) {
    long p = strtol(pid, &end, 10);
    if (*end || (p != (long)getpid() && p != (long)getppid())) return 0;
  }
  return v / 2000; /* half the interval, in ms */
}

void service_form_explain(const char *leader_addr, int world_rank, int world_size,
                          uint64_t waited_ms, char *out, size_t outlen) {
  char hint[384];
  ctrl_leader_hint(leader_addr, hint, sizeof(hint));
  snprintf(out, outlen,
           "world of %d did not form within %llu ms (rank %d): the leader (rank 0) advertises its "
           "control plane at %s; %s",
           world_size, (unsigned long long)waited_ms, world_rank, leader_addr, hint);
}

void service_tick(srv *d, int formed, const char *leader_addr) {
  static uint64_t wd_ms, wd_last, form_deadline;
  static int ready, wd_init, formed_once;
  static char last_status[300];
  uint64_t now = clock_ms();
  if (!wd_init) {
    wd_init = 1;
    wd_ms = service_notify_watchdog_ms();
    /* Every daemon has started by now (MPI or the rendezvous saw them all), so the control plane
     * connects in well under a second when the addresses are right: FGBUFF_FORM_TIMEOUT_MS. */
    form_deadline = d->start_ms + (uint64_t)env_num(ENV_FORM_TIMEOUT_MS);
  }
  if (wd_ms && now - wd_last >= wd_ms) { /* the loop thread runs this: a stuck loop stops it */
    wd_last = now;
    service_notify("WATCHDOG=1");
  }
  /* The deadline is the start's: a world that formed and then lost a peer (formed 0 again) keeps
   * running, its jobs failed or failing with the loss (docs/architecture.md, "Failure model"). */
  if (formed) formed_once = 1;
  if (!formed_once) {
    if (now < form_deadline || d->net.stopping) return;
    char msg[768];
    service_form_explain(leader_addr, d->world_rank, d->world_size, now - d->start_ms, msg,
                         sizeof(msg));
    LOG_ERROR("%s", msg);
    char st[800];
    snprintf(st, sizeof(st), "STATUS=%s\nERRNO=110", msg);
    service_notify(st);
    fflush(NULL);
    _exit(1); /* under mpirun the rest of the world goes down with us */
  }
  /* One unit for the whole world (mpirun under NotifyAccess=all): only the leader, whose control
   * plane is complete once every daemon connected, says READY and STATUS. */
  if (env_num(ENV_NOTIFY) == 1 && d->world_rank != 0) return;
  int jobs = 0, clients = 0;
  for (core_job *j = d->core.jobs; j; j = j->next) jobs++;
  for (const srv_conn *c = d->net.sessions; c; c = c->next) clients++;
  char st[300];
  snprintf(st, sizeof(st), "STATUS=world rank %d of %d %s; %d job%s, %d client%s; socket %.120s",
           d->world_rank, d->world_size, formed ? "formed" : "lost a peer (restart the world)",
           jobs, jobs == 1 ? "" : "s", clients, clients == 1 ? "" : "s", d->net.sock_path);
  if (!ready) {
    ready = 1;
    char msg[320];
    snprintf(msg, sizeof(msg), "READY=1\n%s", st);
    service_notify(msg);
    snprintf(last_status, sizeof(last_status), "%s", st);
  } else if (strcmp(st, last_status) != 0) {
    service_notify(st);
    snprintf(last_status, sizeof(last_status), "%s", st);
  }
}

int service_cp_addr_resolve(char *cp_addr, size_t len, char *err, size_t errlen) {
  if (strncmp(cp_addr, "if:", 3) != 0) return 0;
  const char *name = cp_addr + 3;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    snprintf(err, errlen, "--cp-addr %s: getifaddrs: %s", cp_addr, strerror(errno));
    return -1;
  }
  char found[INET_ADDRSTRLEN] = "";
  for (struct ifaddrs *i = ifs; i && !found[0]; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, name) == 0)
      inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, found, sizeof(found));
  freeifaddrs(ifs);
  if (!found[0]) {
    snprintf(err, errlen, "--cp-addr %s: no interface '%s' with an IPv4 address", cp_addr, name);
    return -1;
  }
  LOG_INFO("control plane: advertising %s (interface %s)", found, name);
  snprintf(cp_addr, len, "%s", found);
  return 0;
}
