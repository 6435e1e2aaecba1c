/* boot/rdv_late.c — rank 0 of a rendezvous world after formation (see rdv_late.h): a member whose
 * daemon was lost and then restarted (systemd's Restart=, a Slurm requeue) sends the same hello to
 * the same port; if its rank is lost, it gets the table with its new address and a one-time token
 * for its control-plane hello, and the leader takes it back (net/ctrl.c). Its own thread and
 * poll(2), as the formation's server: a slow or hostile peer never blocks the loop thread. */
#include "rdv_late.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

struct rdv_late {
  rdv_args a;
  uint8_t key[RDV_KEY];
  char *addrs, *hosts; /* the table, as the last answer gave it */
  int ls, stopfd;
  rdv_grant_fn grant;
  void *ud;
  pthread_t th;
};

typedef struct late_pend {
  int fd;
  size_t got;
  int64_t dl;
  uint8_t h[RDV_HELLO];
} late_pend;

static int64_t late_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A complete hello: the rank's own checks, then the grant (is that rank lost?), then the answer. */
static void late_admit(rdv_late *l, int fd, const uint8_t *h) {
  char why[RDV_REASON];
  int r = 0;
  uint8_t tok[RDV_TOKEN];
  const char *addr = (const char *)h + 16 + RDV_NONCE, *host = addr + RDV_ADDR_MAX;
  if (rdv_hello_check(&l->a, h, &r, why, sizeof(why)) != 0 ||
      l->grant(l->ud, r, addr, tok, why, sizeof(why)) != 0) {
    LOG_WARN("rendezvous: turned away a late peer: %s", why);
    rdv_refuse(fd, why);
    return;
  }
  memcpy(l->addrs + (size_t)r * RDV_ADDR_MAX, addr, RDV_ADDR_MAX);
  memcpy(l->hosts + (size_t)r * RDV_HOST_MAX, host, RDV_HOST_MAX);
  if (rdv_answer(&l->a, fd, h + 16, l->addrs, l->hosts, tok) == 0)
    LOG_INFO(
        "rendezvous: world rank %d's daemon came back from %s (%s): table and a one-time "
        "token sent",
        r, host, addr);
  else
    LOG_WARN("rendezvous: world rank %d came back but its answer could not be sent", r);
}

static void *late_main(void *arg) {
  rdv_late *l = arg;
  late_pend pd[RDV_PEND_MAX];
  int npend = 0;
  for (;;) {
    struct pollfd pf[2 + RDV_PEND_MAX];
    int64_t now = late_now_ms(), wait = 60000;
    pf[0] = (struct pollfd){l->ls, POLLIN, 0};
    pf[1] = (struct pollfd){l->stopfd, POLLIN, 0};
    for (int i = 0; i < npend; i++) {
      if (pd[i].dl - now < wait) wait = pd[i].dl - now;
      pf[2 + i] = (struct pollfd){pd[i].fd, POLLIN, 0};
    }
    int pr = poll(pf, (nfds_t)(2 + npend), wait < 0 ? 0 : (int)wait);
    if (pr < 0 && errno != EINTR) {
      LOG_ERROR("rendezvous: poll: %s; restarted daemons can no longer rejoin", strerror(errno));
      break;
    }
    if (pf[1].revents) break;
    now = late_now_ms();
    for (int i = npend - 1; i >= 0; i--) { /* backwards: removal keeps lower indices */
      late_pend *p = &pd[i];
      if (pr > 0 && pf[2 + i].revents) {
        ssize_t n = recv(p->fd, p->h + p->got, RDV_HELLO - p->got, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n > 0 && (p->got += (size_t)n) < RDV_HELLO) continue;
        if (n > 0) late_admit(l, p->fd, p->h);
      } else if (now >= p->dl) {
        rdv_refuse(p->fd, "no complete hello in time");
      } else {
        continue;
      }
      close(p->fd);
      *p = pd[--npend];
    }
    if (pr > 0 && pf[0].revents) {
      int c = accept4(l->ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0 && npend == RDV_PEND_MAX) {
        rdv_refuse(c, "busy: too many connections at once");
        close(c);
      } else if (c >= 0) {
        pd[npend++] = (late_pend){.fd = c, .dl = now + RDV_HELLO_MS};
      }
    }
  }
  for (int i = 0; i < npend; i++) close(pd[i].fd);
  return NULL;
}

rdv_late *rdv_late_start(int ls, const rdv_args *a, const char *addrs, const char *hosts,
                         rdv_grant_fn grant, void *ud, char *err, size_t errlen) {
  rdv_late *l = calloc(1, sizeof(*l));
  if (!l) return snprintf(err, errlen, "out of memory"), NULL;
  l->a = *a;
  l->a.hostport = NULL;
  l->a.addr = l->a.host = NULL;
  l->a.keep_listener = NULL;
  if (a->key) {
    memcpy(l->key, a->key, RDV_KEY);
    l->a.key = l->key;
  }
  l->addrs = malloc((size_t)a->world * RDV_ADDR_MAX);
  l->hosts = malloc((size_t)a->world * RDV_HOST_MAX);
  l->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  l->ls = ls;
  l->grant = grant;
  l->ud = ud;
  if (!l->addrs || !l->hosts || l->stopfd < 0) {
    snprintf(err, errlen, "rendezvous: out of memory or eventfd");
  } else {
    memcpy(l->addrs, addrs, (size_t)a->world * RDV_ADDR_MAX);
    memcpy(l->hosts, hosts, (size_t)a->world * RDV_HOST_MAX);
    int rc = pthread_create(&l->th, NULL, late_main, l);
    if (rc == 0) return l;
    snprintf(err, errlen, "rendezvous: thread: %s", strerror(rc));
  }
  if (l->stopfd >= 0) close(l->stopfd);
  free(l->addrs);
  free(l->hosts);
  free(l);
  return NULL;
}

void rdv_late_stop(rdv_late *l) {
  if (!l) return;
  uint64_t one = 1;
  (void)!write(l->stopfd, &one, sizeof(one));
  pthread_join(l->th, NULL);
  close(l->stopfd);
  close(l->ls);
  free(l->addrs);
  free(l->hosts);
  free(l);
}
