/* daemon/gpu/glue.c — the GPU data plane's side of the loop thread: start-up of a GPU daemon
 * (bind, MPS check, engine stream, NCCL transport, the coordinator's unique-id hook), CUDA arena
 * registration (legacy IPC and cuMem/VMM fd arenas), and readiness: a submit of a tensor in a CUDA
 * arena is reported to the coordinator only once the client's interprocess event is seen complete
 * (cudaEventQuery from a uv_idle handle while observations are outstanding, so an idle daemon does
 * not spin; see arena.c for why no stream waits on a client's event). The idle handle spins the
 * loop thread while a submit waits for the client's GPU: a backoff to a timer is still to do.
 * Arenas may come with a done page (arena.c): the submit's done_seq is kept on the tensor, the
 * engine writes it after the write-back, and a failed Done writes it from here; with a ready page
 * the submit is seen ready when the client's stream wrote that number (a host read, no query). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "err.h"
#include "fds.h"
#include "gpu.h"
#include "glue.h"
#include "log.h"
#include "vec.h"

typedef struct watch {
  uint64_t t_us; /* when the submit arrived (FGBUFF_GPU_TRACE) */
  uint32_t tensor_id;
  uint64_t step;
  uint32_t slot;
  uint32_t seq;  /* with a ready page: the number the client's stream writes (0: its event) */
  core_arena *a; /* ref held while watched */
} watch;

static watch *g_w;
static uint32_t g_nw, g_wcap;
static uv_idle_t g_idle;
static int g_idle_on;
static srv *g_d;

fgb_status glue_start(srv *d, coord *c, char *err, size_t errlen) {
  /* All connections at communicator creation (on the init thread), none lazily inside a
   * collective call on the engine thread, where a peer that died could block it. */
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  fgb_status st = gpu_bind(d->cfg.device, err, errlen);
  if (st != FGB_OK) return st;
  d->core.gpu = 1;
  d->core.dp = &glue_dp;
  g_d = d;
  if ((st = gpu_engine_init(err, errlen)) != FGB_OK) return st;
  coord_set_uid_maker(c, gpu_make_uid, d);
  return FGB_OK;
}

void glue_announce(srv *d) {
  LOG_INFO("GPU %s (%s, PCI %s, CUDA index %d), MPS %s, done pages %s", gpu_uuid(), gpu_name(),
           gpu_pci(), gpu_index(), gpu_mps() ? "on" : "off",
           gpu_memops_supported() ? "on (stream memory operations)" : "off (done events only)");
  if (!gpu_mps())
    LOG_WARN(
        "not running under an MPS server: the daemon's kernels time-slice with the "
        "trainer's (start nvidia-cuda-mps-control -d as the jobs' user)");
  uv_idle_init(d->loop, &g_idle);
}

fgb_status glue_engine_start(srv *d, char *err, size_t errlen) {
  return eng_start_gpu(d->loop, &comm_nccl_ops, &gpu_engine_ops, core_engine_result, &d->core,
                       &d->core.eng, err, errlen);
}

int glue_sock_name(srv *d, char *out, size_t cap) {
  return snprintf(out, cap, "%s/gpu-%s.sock", d->cfg.runtime_dir, gpu_uuid() + 4);
}

void glue_arena_close(core_arena *a) {
  gpu_arena_close(a->gpu);
}

void glue_on_arena(srv_session *s, uint64_t req_id, const Fgbuff__V1__RegisterArena *m, int *fds,
                   int nfds) {
  int vmm = m->kind == FGBUFF__V1__ARENA_KIND__ARENA_CUDA_VMM_FD;
  int page = m->done_page ? 1 : 0; /* the done page is the last fd */
  if (nfds < page || (!vmm && nfds != page)) {
    fds_close(fds, nfds);
    reply_error(s, req_id, FGB_EINVAL, "num_fds", 0,
                "num_fds: %d fds; a CUDA_IPC arena comes with none but its done page's, a "
                "done page (done_page %d) with its fd last",
                nfds, page);
    return;
  }
  if (s->narenas >= RPC_MAX_ARENAS) {
    fds_close(fds, nfds);
    reply_error(s, req_id, FGB_EINVAL, "bytes", 0, "too many arenas on one connection (%d)",
                RPC_MAX_ARENAS);
    return;
  }
  gpu_arena *ga = NULL;
  void *base = NULL;
  uint8_t *dh = NULL;
  size_t dlen = 0;
  const char *field = "";
  char err[512];
  fgb_status st;
  if (vmm)
    st = gpu_arena_open_vmm(fds, nfds - page, m->vmm_chunk_bytes, m->n_vmm_chunk_bytes,
                            m->vmm_offset, m->device_uuid, m->bytes, m->event_handles.data,
                            m->event_handles.len, &ga, &base, &dh, &dlen, &field, err, sizeof err);
  else
    st = gpu_arena_open(m->cuda_ipc_handle.data, m->cuda_ipc_handle.len, m->device_uuid, m->bytes,
                        m->event_handles.data, m->event_handles.len, &ga, &base, &dh, &dlen, &field,
                        err, sizeof err);
  int has_page = 0;
  if (st == FGB_OK && page) {
    fgb_status pst = gpu_arena_page(ga, fds[nfds - 1], m->ready_page, err, sizeof err);
    if (pst == FGB_EINVAL) { /* a malformed page is the client's error */
      gpu_arena_close(ga);
      free(dh);
      st = pst;
      field = "done_page";
    } else if (pst != FGB_OK) { /* the client falls back to the done events */
      LOG_INFO("client pid %u: no done page (%s)", s->c.pid, err);
    } else {
      has_page = 1;
    }
  }
  /* The imported allocations hold the memory now; the fds are not needed either way. */
  fds_close(fds, nfds);
  if (st != FGB_OK) {
    LOG_WARN("client pid %u: CUDA %s arena refused: %s", s->c.pid, vmm ? "VMM" : "IPC", err);
    reply_error(s, req_id, st, field, 0, "%s", err);
    return;
  }
  core_arena *a = calloc(1, sizeof(*a));
  if (!a) {
    gpu_arena_close(ga);
    free(dh);
    reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory");
    return;
  }
  a->id = s->next_arena_id++;
  a->refs = 1;
  a->base = base;
  a->bytes = m->bytes;
  a->gpu = ga;
  a->dp = &glue_dp;
  a->next = s->arenas;
  s->arenas = a;
  s->narenas++;
  LOG_DEBUG("client pid %u: CUDA %s arena %u, %llu bytes, %u event slots", s->c.pid,
            vmm ? "VMM" : "IPC", a->id, (unsigned long long)m->bytes, gpu_arena_slots(ga));
  Fgbuff__V1__ArenaReply r = FGBUFF__V1__ARENA_REPLY__INIT;
  r.arena_id = a->id;
  r.event_handles.data = dh;
  r.event_handles.len = dlen;
  r.done_page = has_page;
  r.ready_page = has_page && m->ready_page;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, &r);
  free(dh);
}

int glue_slot_check(core_tensor *t, uint32_t slot, char *err, size_t errlen) {
  uint32_t n = gpu_arena_slots(t->arena->gpu);
  if (slot >= n) {
    snprintf(err, errlen, "event_slot: %u outside the arena's ring of %u events", slot, n);
    return -1;
  }
  return 0;
}

static void drop_watch(uint32_t i) {
  core_arena_unref(g_w[i].a);
  g_w[i] = g_w[--g_nw];
}

/* Watch i: its client's readiness seen (or nothing left to report to): reported and dropped,
 * returns 1; still waiting, 0. */
static int watch_poll(uint32_t i) {
  watch *w = &g_w[i];
  core_tensor *t = step_tensor_get(&g_d->core, w->tensor_id);
  int r = w->seq ? gpu_arena_ready_seen(w->a->gpu, w->seq) : gpu_arena_observed(w->a->gpu, w->slot);
  /* Nothing to report to any more; a tensor in another arena holds a reused id (the watched one
   * was released with its job). */
  if (!t || !t->job || t->job->aborted || t->arena != w->a) {
    drop_watch(i);
    return 1;
  }
  if (r == 0) return 0;
  uint32_t tid = w->tensor_id;
  uint64_t step = w->step, t_us = w->t_us, seen_us = clock_us();
  int trace = eng_trace_tensor(t->count);
  drop_watch(i);
  if (r < 0)
    LOG_WARN("tensor %u step %llu: querying the client's event failed", tid,
             (unsigned long long)step);
  core_gpu_observed(&g_d->core, tid, step);
  if (trace) /* after the report: a log write costs ~10 us, which the trace measured itself */
    LOG_INFO("gtrace submit step %llu at %llu observed +%llu us", (unsigned long long)step,
             (unsigned long long)t_us, (unsigned long long)(seen_us - t_us));
  return 1;
}

static void on_idle(uv_idle_t *h) {
  (void)h;
  for (uint32_t i = 0; i < g_nw;) i += !watch_poll(i);
  if (g_nw == 0 && g_idle_on) {
    uv_idle_stop(&g_idle);
    g_idle_on = 0;
  }
}

fgb_status glue_observe(core_tensor *t, uint32_t slot, uint32_t done_seq, uint64_t step, char *err,
                        size_t errlen) {
  if (VEC_RESERVE(g_w, g_wcap, g_nw, 64)) return err_set(err, errlen, FGB_ENOMEM, "out of memory");
  fgb_status st = gpu_arena_observe(t->arena->gpu, slot, err, errlen);
  if (st != FGB_OK) return st;
  t->gpu_slot = slot;
  t->gpu_seq = gpu_arena_has_page(t->arena->gpu) ? done_seq : 0; /* 0: the done event */
  t->arena->refs++;
  uint32_t rseq = gpu_arena_has_ready(t->arena->gpu) ? t->gpu_seq : 0;
  g_w[g_nw++] = (watch){clock_us(), t->id, step, slot, rseq, t->arena};
  if (!g_idle_on) {
    uv_idle_start(&g_idle, on_idle);
    g_idle_on = 1;
  }
  return FGB_OK;
}

void glue_observe_now(void) {
  /* Only a page-read watch: a load. An event watch (cudaEventQuery) waits for the idle pass. */
  if (g_nw && g_w[g_nw - 1].seq) (void)watch_poll(g_nw - 1);
}

void *glue_done_event(const core_tensor *t) {
  return t->arena && t->arena->gpu ? gpu_arena_done_sig(t->arena->gpu, t->gpu_slot, t->gpu_seq)
                                   : NULL;
}

void glue_done_failed(const core_tensor *t) {
  if (t && t->arena && t->arena->gpu) gpu_arena_page_release(t->arena->gpu, t->gpu_seq);
}

void glue_stop(srv *d) {
  (void)d;
  LOG_INFO("GPU: releasing %u observed submits and their arenas", g_nw);
  while (g_nw) drop_watch(g_nw - 1);
  if (g_idle_on) uv_idle_stop(&g_idle);
  g_idle_on = 0;
  if (!uv_is_closing((uv_handle_t *)&g_idle)) uv_close((uv_handle_t *)&g_idle, NULL);
}

size_t glue_status_json(char *buf, size_t cap) {
  return gpu_status_json(buf, cap);
}

/* The loop thread's view of this data plane (dp.h). */
const dp_ops glue_dp = {
    .name = "cuda",
    .sock_name = glue_sock_name,
    .arena_open = glue_on_arena,
    .arena_close = glue_arena_close,
    .slot_check = glue_slot_check,
    .observe = glue_observe,
    .observe_now = glue_observe_now,
    .done_signal = glue_done_event,
    .done_failed = glue_done_failed,
    .job_aborted = gpu_job_aborted,
    .status_json = glue_status_json,
    .mem_text = gpu_mem_text,
};
