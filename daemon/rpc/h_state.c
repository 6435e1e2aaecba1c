/* daemon/rpc/h_state.c — a tensor's compressor state: StateExport and StateImport (core_state runs
 * them on the engine), in chunks when the state is larger than a frame (docs/protocol.md,
 * "StateExport / StateImport"). A chunked export's first request (offset 0) has the engine export
 * the state; this session keeps the bytes and answers them chunk by chunk, each request naming the
 * copy by export_id, until the last chunk was read (or the next export, or the close, frees it). A
 * chunked import's chunks arrive in order from offset 0 and are gathered here (the buffer grows
 * with what arrived, never ahead of it to the announced total; the first chunk's tensor must be
 * the caller's and have a compressor, or nothing is gathered); the last one hands the whole state
 * to the engine, whose result is the last chunk's reply. Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* A StateReply's bytes per chunk: the rest of a frame holds the envelope and the other fields. */
#define STATE_CHUNK (FGB_WIRE_MAX_FRAME - 1024u)
#define STATE_MAX_BYTES (1ull << 40)          /* an import's announced total, at most */
#define STATE_IMPORT_STEP ((size_t)16u << 20) /* an import's first growth */

struct rpc_state_xfer {
  /* export: the chunked request at offset 0 whose engine result is awaited */
  int exp_pending;
  uint64_t exp_req;
  uint32_t exp_pending_tensor;
  /* export: the state being read, and its name */
  uint8_t *exp;
  size_t exp_bytes;
  uint64_t exp_id, next_id;
  uint32_t exp_tensor;
  /* import being gathered (imp_total 0: none) */
  uint8_t *imp;
  size_t imp_total, imp_have, imp_cap;
  uint32_t imp_tensor;
};

static rpc_state_xfer *xfer_of(srv_session *s) {
  if (!s->xfer) s->xfer = calloc(1, sizeof(*s->xfer));
  return s->xfer;
}

static void export_drop(rpc_state_xfer *x) {
  free(x->exp);
  x->exp = NULL;
  x->exp_bytes = 0;
  x->exp_id = 0;
}

static void import_drop(rpc_state_xfer *x) {
  free(x->imp);
  x->imp = NULL;
  x->imp_total = x->imp_have = x->imp_cap = 0;
}

void rpc_state_free(srv_session *s) {
  if (!s->xfer) return;
  export_drop(s->xfer);
  import_drop(s->xfer);
  free(s->xfer);
  s->xfer = NULL;
}

/* The chunk of [base, base + total) at off; the session's copy is freed after its last chunk. */
static void send_chunk(srv_session *s, uint64_t req_id, const uint8_t *base, size_t total,
                       size_t off, uint64_t id) {
  size_t n = total - off < STATE_CHUNK ? total - off : STATE_CHUNK;
  Fgbuff__V1__StateReply r = FGBUFF__V1__STATE_REPLY__INIT;
  r.state.data = (uint8_t *)(n ? base + off : NULL);
  r.state.len = n;
  r.total = total;
  r.offset = off;
  r.done = off + n == total;
  r.export_id = id;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, &r);
  if (r.done && s->xfer && s->xfer->exp == base) export_drop(s->xfer);
}

void rpc_state_exported(srv_session *s, uint64_t req_id, const void *data, size_t len) {
  rpc_state_xfer *x = s->xfer;
  if (x && x->exp_pending && x->exp_req == req_id) { /* a chunked export's first chunk */
    x->exp_pending = 0;
    export_drop(x);
    uint64_t id = 0;
    if (len > STATE_CHUNK) { /* more chunks follow: keep a copy (the engine's is freed) */
      if (!(x->exp = malloc(len))) {
        reply_error(s, req_id, FGB_ENOMEM, "tensor_id", 0,
                    "tensor_id: out of memory for the %zu bytes of exported state", len);
        return;
      }
      memcpy(x->exp, data, len);
      x->exp_bytes = len;
      x->exp_tensor = x->exp_pending_tensor;
      id = x->exp_id = ++x->next_id;
    }
    send_chunk(s, req_id, x->exp ? x->exp : data, len, 0, id);
    return;
  }
  Fgbuff__V1__StateReply r = FGBUFF__V1__STATE_REPLY__INIT; /* the whole state in one reply */
  r.state.data = (uint8_t *)data;
  r.state.len = len;
  if (reply_size(req_id, FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, &r) > FGB_WIRE_MAX_FRAME)
    reply_error(s, req_id, FGB_ENOTSUP, "tensor_id", 0,
                "tensor_id: state of %zu bytes is larger than a frame (%u bytes); export it in "
                "chunks (StateExport.chunked)",
                len, FGB_WIRE_MAX_FRAME);
  else
    reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, &r);
}

void rpc_state_export(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  const Fgbuff__V1__StateExport *m = env->state_export;
  if (m->chunked && m->offset == 0) { /* a new export: the engine's result comes back above */
    rpc_state_xfer *x = xfer_of(s);
    if (!x) {
      reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory");
      return;
    }
    export_drop(x);
    x->exp_pending = 1;
    x->exp_req = req_id;
    x->exp_pending_tensor = m->tensor_id;
  }
  if (!m->chunked || m->offset == 0) {
    core_state(&s->d->core, s->job, s, req_id, m->tensor_id, 0, NULL, 0);
    return;
  }
  rpc_state_xfer *x = s->xfer;
  if (!x || !x->exp || m->export_id != x->exp_id || m->tensor_id != x->exp_tensor) {
    reply_error(s, req_id, FGB_EINVAL, "export_id", 0,
                "export_id: no export %llu of tensor %u is being read on this connection (its "
                "last chunk was read, or a later export replaced it)",
                (unsigned long long)m->export_id, m->tensor_id);
    return;
  }
  if (m->offset >= x->exp_bytes) {
    reply_error(s, req_id, FGB_EINVAL, "offset", 0,
                "offset: %llu is not inside the exported state (%zu bytes)",
                (unsigned long long)m->offset, x->exp_bytes);
    return;
  }
  send_chunk(s, req_id, x->exp, x->exp_bytes, (size_t)m->offset, x->exp_id);
}

void rpc_state_import(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  const Fgbuff__V1__StateImport *m = env->state_import;
  if (m->total == 0) { /* the whole state in this frame */
    core_state(&s->d->core, s->job, s, req_id, m->tensor_id, 1, m->state.data, m->state.len);
    return;
  }
  rpc_state_xfer *x = xfer_of(s);
  if (!x) {
    reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory");
    return;
  }
  if (m->total > STATE_MAX_BYTES) {
    import_drop(x);
    reply_error(s, req_id, FGB_EINVAL, "total", 0, "total: %llu bytes of state exceed 2^40",
                (unsigned long long)m->total);
    return;
  }
  if (m->offset == 0) { /* a new import replaces one left unfinished */
    import_drop(x);
    char err[256]; /* a tensor without state is refused now, not after its last chunk */
    fgb_status st = core_comp_state_check(&s->d->core, s->job, m->tensor_id, err, sizeof err);
    if (st != FGB_OK) {
      reply_error(s, req_id, st, "tensor_id", 0, "%s", err);
      return;
    }
    x->imp_total = (size_t)m->total;
    x->imp_tensor = m->tensor_id;
  } else if (!x->imp_total || m->tensor_id != x->imp_tensor || m->total != x->imp_total ||
             m->offset != x->imp_have) {
    reply_error(s, req_id, FGB_EINVAL, "offset", 0,
                "offset: a chunk of tensor %u at %llu of %llu bytes, but %s (chunks go in "
                "order from offset 0, one import at a time per connection)",
                m->tensor_id, (unsigned long long)m->offset, (unsigned long long)m->total,
                x->imp_total ? "another offset, tensor or total was expected"
                             : "no chunked import is in progress");
    import_drop(x);
    return;
  }
  if (m->state.len == 0 || m->state.len > x->imp_total - x->imp_have) {
    reply_error(s, req_id, FGB_EINVAL, "state", 0,
                "state: a chunk of %zu bytes at %zu does not fit the %zu bytes announced",
                m->state.len, x->imp_have, x->imp_total);
    import_drop(x);
    return;
  }
  size_t need = x->imp_have + m->state.len;
  if (need > x->imp_cap) { /* grows with what arrived: a small frame claims no large buffer */
    size_t cap = x->imp_cap ? x->imp_cap * 2 : STATE_IMPORT_STEP;
    if (cap < need) cap = need;
    if (cap > x->imp_total) cap = x->imp_total;
    uint8_t *nb = realloc(x->imp, cap);
    if (!nb) {
      import_drop(x);
      reply_error(s, req_id, FGB_ENOMEM, "state", 0,
                  "state: out of memory gathering %zu bytes of state", cap);
      return;
    }
    x->imp = nb;
    x->imp_cap = cap;
  }
  memcpy(x->imp + x->imp_have, m->state.data, m->state.len);
  x->imp_have = need;
  if (need < x->imp_total) {
    reply_ok(s, req_id);
    return;
  }
  /* whole: the engine imports it (core_state copies the bytes) and answers this request */
  core_state(&s->d->core, s->job, s, req_id, x->imp_tensor, 1, x->imp, x->imp_total);
  import_drop(x);
}
