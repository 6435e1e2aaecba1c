/* client/donepage.c — done pages and their watchdog (see donepage.h). A stream that waits on a
 * done page proceeds only when someone writes the number: normally fgbuffd's GPU after the
 * write-back; when the tensor's Done fails, the daemon's host (and this library when it reads the
 * Done); when the daemon dies, this file's watchdog thread, which polls a duplicate of the
 * connection for hang-up and then host-writes every number handed out; the same thread releases a
 * stream wait whose timeout passed (a wedged daemon). The result memory then holds undefined data,
 * and the next call of the handle returns the error. */
#include "donepage.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define CLI_PAGE_BYTES 8192 /* done numbers, then ready numbers (4096 bytes each) */
#define CLI_WD_TICK_MS 200  /* how often the watchdog looks at the stream waits' deadlines */

typedef struct cli_wd cli_wd;

struct cli_page {
  int fd;
  uint32_t *host; /* shared with fgbuffd; written by its GPU or a host on failure */
  uint64_t dev;
  uint32_t next;
  uint32_t issued[CLI_PAGE_SLOTS];  /* last number handed out per slot (read by the watchdog) */
  int64_t deadline[CLI_PAGE_SLOTS]; /* CLOCK_MONOTONIC ms a stream wait gives up (0: none) */
  cli_wd *wd;
};

struct cli_wd {
  pthread_t th;
  int sock;    /* a duplicate of the connection: the main thread may close its own */
  int stop[2]; /* pipe: written by cli_page_watch_stop */
  pthread_mutex_t mu;
  cli_page **pages;
  size_t n, cap;
  int expired;      /* a stream wait timed out and was released (reported by the next call) */
  uint32_t exp_seq; /* ... its number */
};

cli_page *cli_page_new(char *err, size_t errlen) {
  cli_page *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  p->fd = memfd_create("fgbuff-done", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (p->fd < 0) {
    snprintf(err, errlen, "memfd_create: %s", strerror(errno));
    free(p);
    return NULL;
  }
  /* Sealed against shrinking: the daemon maps it too and a shorter file would fault there. */
  if (ftruncate(p->fd, CLI_PAGE_BYTES) != 0 ||
      fcntl(p->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    snprintf(err, errlen, "sizing and sealing the page: %s", strerror(errno));
    close(p->fd);
    free(p);
    return NULL;
  }
  p->host = mmap(NULL, CLI_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (p->host == MAP_FAILED) {
    snprintf(err, errlen, "mmap: %s", strerror(errno));
    close(p->fd);
    free(p);
    return NULL;
  }
  void *d = NULL;
  cudaError_t ce =
      cudaHostRegister(p->host, CLI_PAGE_BYTES, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (ce == cudaSuccess && (ce = cudaHostGetDevicePointer(&d, p->host, 0)) != cudaSuccess)
    cudaHostUnregister(p->host);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, errlen, "registering the page with CUDA: %s", cudaGetErrorString(ce));
    munmap(p->host, CLI_PAGE_BYTES);
    close(p->fd);
    free(p);
    return NULL;
  }
  p->dev = (uint64_t)(uintptr_t)d;
  return p;
}

int cli_page_fd(const cli_page *p) {
  return p->fd;
}

uint32_t cli_page_next(cli_page *p) {
  if (++p->next == 0) p->next = 1; /* 0 means "no number" on the wire */
  __atomic_store_n(&p->issued[p->next % CLI_PAGE_SLOTS], p->next, __ATOMIC_RELAXED);
  return p->next;
}

uint64_t cli_page_dev(const cli_page *p, uint32_t seq) {
  return p->dev + (uint64_t)(seq % CLI_PAGE_SLOTS) * sizeof(uint32_t);
}

uint64_t cli_page_ready_dev(const cli_page *p, uint32_t seq) {
  return cli_page_dev(p, seq) + CLI_PAGE_SLOTS * sizeof(uint32_t);
}

/* The slot's number moves forward only (cyclic comparison, as the GPU's GEQ wait). */
static void slot_raise(uint32_t *slot, uint32_t want) {
  uint32_t cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  while ((int32_t)(want - cur) > 0 &&
         !__atomic_compare_exchange_n(slot, &cur, want, 1, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
  }
}

void cli_page_ready_now(cli_page *p, uint32_t seq) {
  /* Release: the daemon's acquire load of the number then sees every write before it. */
  slot_raise(&p->host[CLI_PAGE_SLOTS + seq % CLI_PAGE_SLOTS], seq);
}

void cli_page_release(cli_page *p, uint32_t seq) {
  if (p && seq) slot_raise(&p->host[seq % CLI_PAGE_SLOTS], seq);
}

void cli_page_release_all(cli_page *p) {
  if (!p) return;
  for (uint32_t k = 0; k < CLI_PAGE_SLOTS; k++) {
    uint32_t v = __atomic_load_n(&p->issued[k], __ATOMIC_RELAXED);
    if (v) slot_raise(&p->host[k], v);
  }
}

static void unwatch(cli_page *p) {
  cli_wd *w = p->wd;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < w->n; i++)
    if (w->pages[i] == p) {
      w->pages[i] = w->pages[--w->n];
      break;
    }
  pthread_mutex_unlock(&w->mu);
  p->wd = NULL;
}

void cli_page_free(cli_page *p) {
  if (!p) return;
  cli_page_release_all(p); /* no stream of ours may be left waiting on unmapped memory */
  unwatch(p);
  cudaHostUnregister(p->host);
  (void)cudaGetLastError();
  munmap(p->host, CLI_PAGE_BYTES);
  close(p->fd);
  free(p);
}

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void cli_page_deadline(cli_page *p, uint32_t seq, int timeout_ms) {
  int64_t d = timeout_ms < 0 ? 0 : mono_ms() + timeout_ms + 1;
  __atomic_store_n(&p->deadline[seq % CLI_PAGE_SLOTS], d, __ATOMIC_RELAXED);
}

/* Under w->mu: stream waits past their deadline are released (satisfied ones just forgotten). */
static void wd_deadlines(cli_wd *w) {
  int64_t now = mono_ms();
  for (size_t i = 0; i < w->n; i++) {
    cli_page *p = w->pages[i];
    for (uint32_t k = 0; k < CLI_PAGE_SLOTS; k++) {
      int64_t d = __atomic_load_n(&p->deadline[k], __ATOMIC_RELAXED);
      if (!d) continue;
      uint32_t v = __atomic_load_n(&p->issued[k], __ATOMIC_RELAXED);
      uint32_t cur = __atomic_load_n(&p->host[k], __ATOMIC_ACQUIRE);
      if ((int32_t)(cur - v) >= 0) {
        __atomic_compare_exchange_n(&p->deadline[k], &d, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
      } else if (now >= d) {
        slot_raise(&p->host[k], v);
        __atomic_store_n(&p->deadline[k], 0, __ATOMIC_RELAXED);
        if (!__atomic_load_n(&w->expired, __ATOMIC_ACQUIRE)) {
          w->exp_seq = v;
          __atomic_store_n(&w->expired, 1, __ATOMIC_RELEASE);
        }
      }
    }
  }
}

int cli_page_expired(fgb_client *c, uint32_t *seq) {
  cli_wd *w = c->wd;
  if (!w || !__atomic_load_n(&w->expired, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&w->mu);
  *seq = w->exp_seq;
  w->expired = 0;
  pthread_mutex_unlock(&w->mu);
  return 1;
}

static void *wd_main(void *arg) {
  cli_wd *w = arg;
  for (;;) {
    struct pollfd pf[2] = {{w->sock, POLLRDHUP, 0}, {w->stop[0], POLLIN, 0}};
    int n = poll(pf, 2, CLI_WD_TICK_MS);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      pthread_mutex_lock(&w->mu);
      wd_deadlines(w);
      pthread_mutex_unlock(&w->mu);
      continue;
    }
    if (n < 0 || (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) return NULL;
    if (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) break;
  }
  /* The daemon's end is closed: nothing will write the pages any more. */
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < w->n; i++) cli_page_release_all(w->pages[i]);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

fgb_status cli_page_watch(fgb_client *c, cli_page *p) {
  cli_wd *w = c->wd;
  if (!w) {
    if (c->sock < 0) return cli_fail(c, FGB_ECLOSED, "not connected");
    if (!(w = calloc(1, sizeof *w))) return cli_fail(c, FGB_ENOMEM, "out of memory");
    w->sock = fcntl(c->sock, F_DUPFD_CLOEXEC, 0);
    if (w->sock < 0 || pipe2(w->stop, O_CLOEXEC) != 0) {
      int e = errno;
      if (w->sock >= 0) close(w->sock);
      free(w);
      return cli_fail(c, FGB_EIO, "starting the done-page watchdog: %s", strerror(e));
    }
    pthread_mutex_init(&w->mu, NULL);
    if (pthread_create(&w->th, NULL, wd_main, w) != 0) {
      close(w->sock);
      close(w->stop[0]);
      close(w->stop[1]);
      pthread_mutex_destroy(&w->mu);
      free(w);
      return cli_fail(c, FGB_EIO, "cannot start the done-page watchdog thread");
    }
    c->wd = w;
  }
  pthread_mutex_lock(&w->mu);
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 8;
    cli_page **np = realloc(w->pages, cap * sizeof *np);
    if (!np) {
      pthread_mutex_unlock(&w->mu);
      return cli_fail(c, FGB_ENOMEM, "out of memory");
    }
    w->pages = np;
    w->cap = cap;
  }
  w->pages[w->n++] = p;
  p->wd = w;
  pthread_mutex_unlock(&w->mu);
  return FGB_OK;
}

void cli_page_watch_stop(fgb_client *c) {
  cli_wd *w = c->wd;
  if (!w) return;
  char b = 1;
  ssize_t rc;
  do {
    rc = write(w->stop[1], &b, 1);
  } while (rc < 0 && errno == EINTR);
  pthread_join(w->th, NULL);
  /* Pages still listed are freed with their arenas later: they must not point back here. */
  for (size_t i = 0; i < w->n; i++) w->pages[i]->wd = NULL;
  close(w->sock);
  close(w->stop[0]);
  close(w->stop[1]);
  pthread_mutex_destroy(&w->mu);
  free(w->pages);
  free(w);
  c->wd = NULL;
}
