/* client/sync.c — gradient synchronisation and ad-hoc collectives: submit and end-of-step only
 * send; waits consume the Done messages conn.c buffered (one per registered tensor and step, since
 * the daemon flushes unsubmitted tensors as zeros at EndStep). FGBUFF_CLIENT_TRACE=1 prints, per
 * fgb_wait_on_stream, when its tensor was submitted, sent, its Done read and the wait returned
 * (CLOCK_MONOTONIC us, comparable with the daemon's FGBUFF_GPU_TRACE lines on the same host). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "ring.h"

static fgb_status cli_check_tensor(fgb_client *c, uint32_t tensor_id) {
  if (cli_tensor_find(c, tensor_id) == NULL)
    return cli_fail(c, FGB_ENOTFOUND, "tensor id %u was not registered through this handle",
                    tensor_id);
  return FGB_OK;
}

/* Read what already arrived without blocking, so asynchronous errors surface promptly and the
 * daemon's Done messages do not pile up in the socket while the trainer only submits. */
static fgb_status cli_drain(fgb_client *c) {
  fgb_status s;
  while ((s = cli_pump(c, 0)) == FGB_OK) {
  }
  return s == FGB_ETIMEDOUT ? FGB_OK : s;
}

/* At most this many tensors' slots and numbers on the stack per fgb_submit_many round. */
#define CLI_SUBMIT_CHUNK 64

/* Publish n Submits whose marks (event slot, done-page number) are in slots/seqs: the ring when
 * attached and not full, the socket otherwise (the daemon keeps the order). */
static fgb_status submit_send(fgb_client *c, const uint32_t *ids, const uint32_t *slots,
                              const uint32_t *seqs, size_t n, uint64_t step, int64_t t0) {
  fgb_status s = FGB_OK;
  int put = 0; /* records in the ring not yet rung for */
  for (size_t i = 0; i < n && s == FGB_OK; i++) {
    Fgbuff__V1__Submit m = FGBUFF__V1__SUBMIT__INIT;
    m.tensor_id = ids[i];
    m.step = step;
    m.event_slot = slots[i]; /* host arenas: 0, the data is final when submitted; no event ring */
    m.done_seq = seqs[i];
    int in_ring = c->ring != NULL && cli_ring_put(c->ring, ++c->next_req, c->sent_frames, &m);
    put |= in_ring;
    if (!in_ring) {
      if (put) cli_ring_kick(c->ring); /* the ring's records before this frame */
      put = 0;
      Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
      env.body_case = FGBUFF__V1__ENVELOPE__BODY_SUBMIT;
      env.submit = &m;
      s = cli_send(c, &env, NULL, 0);
    }
    cli_tensor *t = cli_tensor_mut(c, ids[i]);
    if (t && s == FGB_OK) { /* what fgb_wait_on_stream of this step may wait on */
      t->sub_valid = seqs[i] != 0;
      t->sub_step = step;
      t->sub_seq = seqs[i];
    }
  }
  if (put) cli_ring_kick(c->ring); /* one doorbell for the whole group */
  if (n) {
    c->tr_tensor = ids[n - 1];
    c->tr_step = step;
    c->tr_submit_us = t0;
    c->tr_sent_us = cli_now_us();
  }
  return s;
}

CLI_API fgb_status fgb_submit_many(fgb_client *c, const uint32_t *tensor_ids, size_t n,
                                   uint64_t step, void *stream) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s || n == 0) return s;
  if (tensor_ids == NULL)
    return cli_fail(c, FGB_EINVAL, "fgb_submit_many: tensor_ids is NULL (n = %zu)", n);
  if (n == 1 && (s = cli_check_tensor(c, tensor_ids[0]))) return s;
  for (size_t i = 0; n > 1 && i < n; i++)
    if (cli_tensor_find(c, tensor_ids[i]) == NULL)
      return cli_fail(c, FGB_ENOTFOUND,
                      "tensor id %u (index %zu of %zu) was not registered through this handle",
                      tensor_ids[i], i, n);
  int64_t t0 = cli_now_us();
  /* With the ring, what arrived on the socket (mostly earlier Dones) is read after the records
   * are published, off the way to the daemon; cli_ready above returned what was read before. */
  if (c->ring == NULL && ((s = cli_drain(c)) || (s = cli_take_pending(c)))) return s;
  uint32_t slots[CLI_SUBMIT_CHUNK], seqs[CLI_SUBMIT_CHUNK];
  for (size_t i = 0; i < n && s == FGB_OK; i += CLI_SUBMIT_CHUNK) {
    size_t m = n - i < CLI_SUBMIT_CHUNK ? n - i : CLI_SUBMIT_CHUNK;
#ifdef FGBUFF_HAVE_CUDA
    /* device arenas: the marks on the stream first (an event slot, or the done page's number
     * written by the stream), so that the daemon never sees a Submit before its mark */
    if ((s = cli_cuda_submit(c, tensor_ids + i, m, stream, slots, seqs))) return s;
#else
    (void)stream;
    memset(slots, 0, m * sizeof slots[0]);
    memset(seqs, 0, m * sizeof seqs[0]);
#endif
    s = submit_send(c, tensor_ids + i, slots, seqs, m, step, t0);
  }
  fgb_status late;
  if (s == FGB_OK && c->ring && (late = cli_drain(c)) != FGB_OK && !c->pending) {
    /* These Submits are on their way: what the read found is the next call's to report. */
    c->pending = late;
    snprintf(c->pending_msg, sizeof(c->pending_msg), "%s", c->err);
    c->err[0] = '\0';
  }
  return s;
}

CLI_API fgb_status fgb_submit(fgb_client *c, uint32_t tensor_id, uint64_t step, void *stream) {
  return fgb_submit_many(c, &tensor_id, 1, step, stream);
}

CLI_API fgb_status fgb_end_step(fgb_client *c, uint64_t step) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s) return s;
  if ((s = cli_drain(c)) || (s = cli_take_pending(c))) return s;
  Fgbuff__V1__EndStep m = FGBUFF__V1__END_STEP__INIT;
  m.step = step;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_END_STEP;
  env.end_step = &m;
  return cli_send(c, &env, NULL, 0);
}

/* Report a buffered Done: its status, with the daemon's text when it failed. */
static fgb_status cli_done_result(fgb_client *c, const cli_done *d) {
  if (d->status == FGB_OK) return FGB_OK;
  return cli_fail(c, d->status, "tensor %u step %llu: %s", d->tensor_id,
                  (unsigned long long)d->step, d->error ? d->error : fgb_strerror(d->status));
}

CLI_API fgb_status fgb_test(fgb_client *c, uint32_t tensor_id, uint64_t step) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s || (s = cli_check_tensor(c, tensor_id))) return s;
  cli_done *d = cli_find_done(c, tensor_id, step);
  if (d == NULL) {
    if ((s = cli_drain(c)) || (s = cli_take_pending(c))) return s;
    d = cli_find_done(c, tensor_id, step);
  }
  if (d == NULL) return FGB_EAGAIN;
  s = cli_done_result(c, d);
  cli_mark_seen(c, cli_find_done(c, tensor_id, step));
  return s;
}

CLI_API fgb_status fgb_wait(fgb_client *c, uint32_t tensor_id, uint64_t step, int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s || (s = cli_check_tensor(c, tensor_id))) return s;
  int64_t deadline = cli_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  int64_t spin_until = cli_now_us() + cli_spin_us(c);
  cli_done *d;
  while ((d = cli_find_done(c, tensor_id, step)) == NULL) {
    if ((s = cli_take_pending(c))) return s;
    s = cli_pump_wait(c, spin_until, deadline, timeout_ms);
    if (s == FGB_ETIMEDOUT)
      return cli_fail(c, s, "tensor %u step %llu not done within %d ms", tensor_id,
                      (unsigned long long)step, timeout_ms);
    if (s) return s;
  }
  s = cli_done_result(c, d);
  cli_mark_seen(c, d);
  return s;
}

#ifdef FGBUFF_HAVE_CUDA
static void wait_trace(fgb_client *c, uint32_t tensor_id, uint64_t step, const cli_done *d,
                       const char *path) {
  static _Atomic int trace = -1;
  if (trace < 0) trace = getenv("FGBUFF_CLIENT_TRACE") != NULL;
  if (!trace || c->tr_tensor != tensor_id || c->tr_step != step) return;
  int64_t t = cli_now_us(), t0 = c->tr_submit_us;
  fprintf(stderr,
          "ctrace pid %d rank %d tensor %u step %llu submit %lld: sent +%lld done-read +%lld "
          "stream-waits +%lld us (%s)\n",
          (int)getpid(), (int)c->rank, tensor_id, (unsigned long long)step, (long long)t0,
          (long long)(c->tr_sent_us - t0), d ? (long long)(d->rx_us - t0) : -1ll,
          (long long)(t - t0), path);
}

/* The done page: the stream waits for the submit's number; the host does not wait for Done
 * (docs/protocol.md, "Done on stream memory"). 1 when it applied (status in *out). */
static int wait_on_page(fgb_client *c, uint32_t tensor_id, uint64_t step, void *stream,
                        int timeout_ms, fgb_status *out) {
  cli_tensor *t = cli_tensor_mut(c, tensor_id);
  if (!t || !t->sub_valid || t->sub_step != step || !cli_cuda_has_page(c, tensor_id)) return 0;
  /* A tensor's first sync agrees its settings across ranks (a mismatch fails it there): until one
   * of its Dones succeeded, the wait is on the host, so such errors come from this call. */
  if (!t->done_once) return 0;
  cli_done *d = cli_find_done(c, tensor_id, step);
  if (d) { /* already here: the GPU work is complete (or failed: the number was released) */
    *out = d->status == FGB_OK
               ? FGB_OK
               : cli_fail(c, d->status, "tensor %u step %llu: %s", tensor_id,
                          (unsigned long long)step, d->error ? d->error : fgb_strerror(d->status));
    wait_trace(c, tensor_id, step, d, "memop, done already");
    cli_mark_seen(c, d);
    return 1;
  }
  *out = cli_cuda_wait_seq(c, tensor_id, t->sub_seq, stream, timeout_ms);
  if (*out != FGB_OK) { /* no stream wait: wait for the Done on the host (result in place) */
    *out = fgb_wait(c, tensor_id, step, timeout_ms);
    wait_trace(c, tensor_id, step, cli_find_done(c, tensor_id, step), "memop failed, host wait");
    return 1;
  }
  t->early_valid = 1; /* conn.c: its Done is consumed (or made the pending error) on arrival */
  t->early_step = step;
  wait_trace(c, tensor_id, step, NULL, "memop");
  return 1;
}
#endif

#ifdef FGBUFF_HAVE_CUDA
/* fgb_wait_on_stream; with try_only, FGB_EAGAIN (nothing enqueued) where it would wait for the
 * Done on the host and the Done is not here (fgb_try_wait_on_stream). */
static fgb_status wait_stream(fgb_client *c, uint32_t tensor_id, uint64_t step, void *stream,
                              int timeout_ms, int try_only) {
  fgb_status s = cli_ready(c);
  if (s || (s = cli_check_tensor(c, tensor_id))) return s;
  if (wait_on_page(c, tensor_id, step, stream, timeout_ms, &s)) return s;
  if (try_only && cli_find_done(c, tensor_id, step) == NULL) {
    /* No stream wait to enqueue: only once the Done is here does the host not block. */
    if ((s = cli_drain(c)) || (s = cli_take_pending(c))) return s;
    if (cli_find_done(c, tensor_id, step) == NULL) return FGB_EAGAIN;
  }
  s = fgb_wait(c, tensor_id, step, timeout_ms);
  if (s) return s;
  const cli_done *d = cli_find_done(c, tensor_id, step);
  /* A tensor of a page arena before its first successful Done, or not submitted this step
   * (flushed as zeros at EndStep): its Done came after the daemon's GPU work completed, so there
   * is nothing for the stream to wait on. */
  if (cli_cuda_has_page(c, tensor_id)) {
    wait_trace(c, tensor_id, step, d, "memop, host wait");
    return FGB_OK;
  }
  s = cli_cuda_wait_stream(c, tensor_id, d ? d->event_slot : 0, stream);
  wait_trace(c, tensor_id, step, d, "event");
  return s;
}
#endif

CLI_API fgb_status fgb_wait_on_stream(fgb_client *c, uint32_t tensor_id, uint64_t step,
                                      void *stream, int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
#ifdef FGBUFF_HAVE_CUDA
  return wait_stream(c, tensor_id, step, stream, timeout_ms, 0);
#else
  return cli_fail(c, FGB_ENOTSUP,
                  "fgb_wait_on_stream: no CUDA support in this build of the client");
#endif
}

CLI_API fgb_status fgb_try_wait_on_stream(fgb_client *c, uint32_t tensor_id, uint64_t step,
                                          void *stream, int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
#ifdef FGBUFF_HAVE_CUDA
  return wait_stream(c, tensor_id, step, stream, timeout_ms, 1);
#else
  return cli_fail(c, FGB_ENOTSUP,
                  "fgb_try_wait_on_stream: no CUDA support in this build of the client");
#endif
}

#ifdef FGBUFF_HAVE_CUDA
/* The done-page waits fgb_wait_many_on_stream gathered: one cuStreamBatchMemOp per
 * CLI_BATCH_MEMOPS; where the batch cannot be enqueued, each tensor as fgb_wait_on_stream does
 * (its single stream wait, else a host wait). No socket is read between gathering a tensor (its
 * Done was not there) and marking it early_valid here, so no Done of it is buffered unseen. */
static fgb_status flush_page_waits(fgb_client *c, const uint32_t *ids, const uint32_t *seqs,
                                   size_t *nb, uint64_t step, void *stream, int timeout_ms) {
  size_t n = *nb;
  *nb = 0;
  if (n == 0) return FGB_OK;
  fgb_status s = cli_cuda_wait_seqs(c, ids, seqs, n, stream, timeout_ms);
  if (s == FGB_OK) {
    for (size_t k = 0; k < n; k++) {
      cli_tensor *t = cli_tensor_mut(c, ids[k]);
      t->early_valid = 1; /* conn.c: its Done is consumed (or made the pending error) on arrival */
      t->early_step = step;
      wait_trace(c, ids[k], step, NULL, "memop, batched");
    }
    return FGB_OK;
  }
  for (size_t k = 0; k < n; k++) {
    if (!wait_on_page(c, ids[k], step, stream, timeout_ms, &s))
      s = fgb_wait_on_stream(c, ids[k], step, stream, timeout_ms);
    if (s) return s;
  }
  return FGB_OK;
}
#endif

CLI_API fgb_status fgb_wait_many_on_stream(fgb_client *c, const uint32_t *tensor_ids, size_t n,
                                           uint64_t step, void *stream, int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s || n == 0) return s;
  if (tensor_ids == NULL)
    return cli_fail(c, FGB_EINVAL, "fgb_wait_many_on_stream: tensor_ids is NULL (n = %zu)", n);
  for (size_t i = 0; i < n; i++)
    if (cli_tensor_find(c, tensor_ids[i]) == NULL)
      return cli_fail(c, FGB_ENOTFOUND,
                      "tensor id %u (index %zu of %zu) was not registered through this handle",
                      tensor_ids[i], i, n);
#ifdef FGBUFF_HAVE_CUDA
  uint32_t ids[CLI_BATCH_MEMOPS], seqs[CLI_BATCH_MEMOPS];
  size_t nb = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t id = tensor_ids[i];
    cli_tensor *t = cli_tensor_mut(c, id);
    if (!cli_cuda_on_device(c, id)) { /* host memory: the result is in place once Done */
      if ((s = flush_page_waits(c, ids, seqs, &nb, step, stream, timeout_ms)) ||
          (s = fgb_wait(c, id, step, timeout_ms)))
        return s;
      continue;
    }
    /* as wait_on_page: the stream waits on the page for this submit's number */
    if (t->sub_valid && t->sub_step == step && t->done_once && cli_cuda_has_page(c, id)) {
      if (cli_find_done(c, id, step) != NULL) { /* already here: nothing to wait on */
        if (wait_on_page(c, id, step, stream, timeout_ms, &s) && s) return s;
        continue;
      }
      ids[nb] = id;
      seqs[nb] = t->sub_seq;
      if (++nb == CLI_BATCH_MEMOPS &&
          (s = flush_page_waits(c, ids, seqs, &nb, step, stream, timeout_ms)))
        return s;
      continue;
    }
    /* a first sync, a tensor not submitted this step, done events: waits on the host */
    if ((s = flush_page_waits(c, ids, seqs, &nb, step, stream, timeout_ms)) ||
        (s = fgb_wait_on_stream(c, id, step, stream, timeout_ms)))
      return s;
  }
  return flush_page_waits(c, ids, seqs, &nb, step, stream, timeout_ms);
#else
  (void)stream; /* no device arenas without CUDA: every tensor lives in host memory */
  for (size_t i = 0; i < n; i++)
    if ((s = fgb_wait(c, tensor_ids[i], step, timeout_ms))) return s;
  return FGB_OK;
#endif
}

CLI_API fgb_status fgb_wait_step(fgb_client *c, uint64_t step, int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s) return s;
  int64_t deadline = cli_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  int64_t spin_until = cli_now_us() + cli_spin_us(c);
  for (;;) {
    size_t have = 0;
    for (size_t i = 0; i < c->n_tensors; i++) {
      cli_done *d = cli_find_done(c, c->tensors[i].id, step);
      if (d == NULL) continue;
      /* A failed tensor fails the step now: the rest may never come (peer died). */
      if (d->status != FGB_OK) return cli_done_result(c, d);
      have++;
    }
    if (have == c->n_tensors) break;
    if ((s = cli_take_pending(c))) return s;
    s = cli_pump_wait(c, spin_until, deadline, timeout_ms);
    if (s == FGB_ETIMEDOUT)
      return cli_fail(c, s, "step %llu: %zu of %zu tensors done within %d ms",
                      (unsigned long long)step, have, c->n_tensors, timeout_ms);
    if (s) return s;
  }
  cli_drop_dones(c, step);
  return FGB_OK;
}

/* ---- ad-hoc collectives -------------------------------------------------------------------- */
static fgb_status cli_collective(fgb_client *c, Fgbuff__V1__Collective *m, int timeout_ms) {
  fgb_status s = cli_ready(c);
  if (s) return s;
  if (!c->joined) return cli_fail(c, FGB_EINVAL, "join a job (fgb_join) before collectives");
  m->seq = ++c->coll_seq;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE;
  env.collective = m;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE_DONE, timeout_ms, &r);
  if (s) return s;
  const Fgbuff__V1__CollectiveDone *d = r->collective_done;
  if (d->seq != m->seq) {
    s = cli_fail(c, FGB_EPROTO, "collective %llu answered with sequence %llu",
                 (unsigned long long)m->seq, (unsigned long long)d->seq);
  } else if (d->status != 0) {
    s = cli_fail(c, cli_code(d->status), "collective %llu: %s", (unsigned long long)m->seq,
                 d->error[0] ? d->error : fgb_strerror(cli_code(d->status)));
  }
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  return s;
}

CLI_API fgb_status fgb_allreduce(fgb_client *c, uint32_t tensor_id, fgb_reduce_op op,
                                 int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_check_tensor(c, tensor_id);
  if (s) return s;
  if (op != FGB_OP_AVERAGE && op != FGB_OP_SUM)
    return cli_fail(c, FGB_EINVAL, "unknown reduce op %d", (int)op);
  Fgbuff__V1__Collective m = FGBUFF__V1__COLLECTIVE__INIT;
  m.kind = FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_ALLREDUCE;
  m.tensor_id = tensor_id;
  m.op = (Fgbuff__V1__ReduceOp)op;
  return cli_collective(c, &m, timeout_ms);
}

CLI_API fgb_status fgb_broadcast(fgb_client *c, uint32_t tensor_id, int32_t root, int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_check_tensor(c, tensor_id);
  if (s) return s;
  if (root < 0 || (c->joined && root >= c->size))
    return cli_fail(c, FGB_EINVAL, "broadcast root %d is not a rank of the job", (int)root);
  Fgbuff__V1__Collective m = FGBUFF__V1__COLLECTIVE__INIT;
  m.kind = FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_BROADCAST;
  m.tensor_id = tensor_id;
  m.root = root;
  return cli_collective(c, &m, timeout_ms);
}

CLI_API fgb_status fgb_allgather(fgb_client *c, uint32_t src_tensor, uint32_t dst_tensor,
                                 int timeout_ms) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_check_tensor(c, src_tensor);
  if (s || (s = cli_check_tensor(c, dst_tensor))) return s;
  if (src_tensor == dst_tensor)
    return cli_fail(c, FGB_EINVAL, "allgather source and destination are the same tensor");
  Fgbuff__V1__Collective m = FGBUFF__V1__COLLECTIVE__INIT;
  m.kind = FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_ALLGATHER;
  m.tensor_id = src_tensor;
  m.dst_tensor_id = dst_tensor;
  return cli_collective(c, &m, timeout_ms);
}
