/* daemon/rpc/h_arena.c — a client's arenas: RegisterArena (a sealed memfd mapped here; CUDA kinds
 * go to the data plane, dp_ops' arena_open) and ReleaseArena (once no tensor lives in it). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fds.h"
#include "rpc.h"
#include "shmfd.h"

static void on_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__RegisterArena *m, int *fds,
                     int nfds) {
  if (s->d->core.dp && (m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC ||
                        m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD)) {
    s->d->core.dp->arena_open(s, req_id, m, fds, nfds);
    return;
  }
  if (m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_IPC ||
      m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD) {
    fds_close(fds, nfds);
    reply_error(s, req_id, FGB_ENOTSUP, "kind", 0,
                "kind: CUDA arenas need a GPU daemon (--device cuda:...)");
    return;
  }
  if (m->kind != FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD) {
    fds_close(fds, nfds);
    reply_error(s, req_id, FGB_EINVAL, "kind", 0, "kind: unknown arena kind %d", (int)m->kind);
    return;
  }
  if (s->d->core.gpu) {
    /* The GPU engine hands every tensor pointer to NCCL and the kernels: host memory there is an
     * illegal address, and that error poisons the daemon's CUDA context for every job. */
    fds_close(fds, nfds);
    reply_error(s, req_id, FGB_ENOTSUP, "kind", 0,
                "kind: this daemon drives a GPU and syncs device memory only: register it "
                "with fgb_arena_register_cuda (host memory needs a CPU daemon)");
    return;
  }
  if (nfds != 1) {
    fds_close(fds, nfds);
    reply_error(s, req_id, FGB_EINVAL, "num_fds", 0,
                "num_fds: a HOST_MEMFD arena comes with exactly 1 fd (got %d)", nfds);
    return;
  }
  int fd = fds[0];
  if (m->bytes == 0 || m->bytes > RPC_MAX_ARENA_BYTES) {
    close(fd);
    reply_error(s, req_id, FGB_EINVAL, "bytes", 0, "bytes: arena size %llu outside 1..2^40",
                (unsigned long long)m->bytes);
    return;
  }
  if (s->narenas >= RPC_MAX_ARENAS) {
    close(fd);
    reply_error(s, req_id, FGB_EINVAL, "bytes", 0, "too many arenas on one connection (%d)",
                RPC_MAX_ARENAS);
    return;
  }
  /* Only a memfd sealed against shrinking: a truncated file would SIGBUS the daemon (issue 15). */
  const char *field;
  char why[320];
  if (shmfd_check(fd, m->bytes, F_SEAL_SHRINK, "the arena's fd", &field, why, sizeof(why))) {
    close(fd);
    reply_error(s, req_id, FGB_EINVAL, field, 0, "%s", why);
    return;
  }
  void *p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    reply_error(s, req_id, FGB_EIO, "bytes", 0, "bytes: cannot map the arena (%llu bytes)",
                (unsigned long long)m->bytes);
    return;
  }
  core_arena *a = calloc(1, sizeof(*a));
  if (!a) {
    munmap(p, m->bytes);
    reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory");
    return;
  }
  a->id = s->next_arena_id++;
  a->refs = 1;
  a->base = p;
  a->bytes = m->bytes;
  a->next = s->arenas;
  s->arenas = a;
  s->narenas++;
  Fgbuff__V1__ArenaReply r = FGBUFF__V1__ARENA_REPLY__INIT;
  r.arena_id = a->id;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, &r);
}

/* ReleaseArena: unmap (or close, GPU) an arena of this connection that no tensor lives in. */
static void on_release_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__ReleaseArena *m) {
  srv *d = s->d;
  core_arena **pa = &s->arenas;
  while (*pa && (*pa)->id != m->arena_id) pa = &(*pa)->next;
  if (!*pa) {
    reply_error(s, req_id, FGB_ENOTFOUND, "arena_id", 0,
                "arena_id %u: not an arena of this connection", m->arena_id);
    return;
  }
  core_arena *a = *pa;
  uint32_t n = 0;
  const char *first = NULL;
  for (uint32_t i = 0; i < d->core.ntensors; i++) {
    const core_tensor *t = d->core.tensors[i];
    if (t && t->arena == a) {
      if (!first) first = t->name;
      n++;
    }
  }
  if (n) {
    reply_error(s, req_id, FGB_EBUSY, "arena_id", 0,
                "arena_id %u: %u registered tensor%s still live%s in it ('%s'); release %s first",
                a->id, n, n == 1 ? "" : "s", n == 1 ? "s" : "", first, n == 1 ? "it" : "them");
    return;
  }
  *pa = a->next;
  s->narenas--;
  core_arena_unref(a); /* the last reference unless the engine still holds work on it */
  reply_ok(s, req_id);
}

void rpc_register_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env, int *fds,
                        int nfds) {
  on_arena(s, req_id, env->register_arena, fds, nfds);
}

void rpc_release_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_release_arena(s, req_id, env->release_arena);
}
