/* daemon/scheduler/coord_wire.c — the coordinator's control-message codec: compact little-endian
 * binary, one version byte and one type byte, then the type's fields (format table at the top of
 * coordinator.c). Decoding trusts nothing: every length and count is checked against the bytes
 * left and against a cap before anything is allocated, and trailing bytes are an error. The checks
 * and names of job ids and tensor descriptions it uses: coord_check.c.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

const char *coord_msg_name(uint8_t type) {
  switch (type) {
    case COORD_MSG_JOIN:
      return "JOIN";
    case COORD_MSG_LEAVE:
      return "LEAVE";
    case COORD_MSG_META:
      return "META";
    case COORD_MSG_READY:
      return "READY";
    case COORD_MSG_PRE:
      return "PRE";
    case COORD_MSG_FORMED:
      return "FORMED";
    case COORD_MSG_REFUSED:
      return "REFUSED";
    case COORD_MSG_TENSOR_OK:
      return "TENSOR_OK";
    case COORD_MSG_MISMATCH:
      return "MISMATCH";
    case COORD_MSG_ISSUE:
      return "ISSUE";
    case COORD_MSG_STALL:
      return "STALL";
    case COORD_MSG_ABORT:
      return "ABORT";
    case COORD_MSG_ERROR:
      return "ERROR";
    case COORD_MSG_PREISSUE:
      return "PREISSUE";
    case COORD_MSG_RECALL:
      return "RECALL";
    case COORD_MSG_RECALLED:
      return "RECALLED";
    case COORD_MSG_FUSE:
      return "FUSE";
    case COORD_MSG_RECALL_ASK:
      return "RECALL_ASK";
    case COORD_MSG_REVOKE:
      return "REVOKE";
  }
  return "unknown";
}

void coord_msg_init(coord_msg *m, uint8_t type) {
  memset(m, 0, sizeof *m);
  m->type = type;
  m->failed_rank = -1;
}

void coord_msg_clear(coord_msg *m) {
  free(m->keys);
  free(m->ranks);
  free(m->gens);
  m->keys = NULL;
  m->ranks = NULL;
  m->gens = NULL;
  m->nkeys = 0;
  m->nranks = 0;
}

/* ---- encoding ---------------------------------------------------------------------------- */
typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
  int oom;
} wbuf;

static void w_bytes(wbuf *w, const void *src, size_t n) {
  if (w->oom) return;
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 64;
    while (cap < w->len + n) cap *= 2;
    uint8_t *p = realloc(w->p, cap);
    if (!p) {
      w->oom = 1;
      return;
    }
    w->p = p;
    w->cap = cap;
  }
  memcpy(w->p + w->len, src, n);
  w->len += n;
}

static void w_u8(wbuf *w, uint8_t v) {
  w_bytes(w, &v, 1);
}

static void w_u16(wbuf *w, uint16_t v) {
  uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  w_bytes(w, b, 2);
}

static void w_u32(wbuf *w, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
  w_bytes(w, b, 4);
}

static void w_u64(wbuf *w, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  w_bytes(w, b, 8);
}

static void w_name(wbuf *w, const char *s) {
  size_t n = strnlen(s, COORD_MAX_NAME);
  w_u8(w, (uint8_t)n);
  w_bytes(w, s, n);
}

static void w_text(wbuf *w, const char *s) {
  size_t n = strnlen(s, COORD_MAX_TEXT);
  w_u16(w, (uint16_t)n);
  w_bytes(w, s, n);
}

static void w_job(wbuf *w, const coord_job_id *j) {
  w_name(w, j->name);
  w_u64(w, j->incarnation);
}

/* u32 n (1..COORD_MAX_BATCH), u32 keys[n]; -1 (nothing written) for n out of range. */
static int w_keys(wbuf *w, const coord_msg *m) {
  if (m->nkeys == 0 || m->nkeys > COORD_MAX_BATCH) return -1;
  w_u32(w, m->nkeys);
  for (uint32_t i = 0; i < m->nkeys; i++) w_u32(w, m->keys[i]);
  return 0;
}

fgb_status coord_msg_encode(const coord_msg *m, uint8_t **out, size_t *outlen) {
  wbuf w = {0};
  *out = NULL;
  *outlen = 0;
  w_u8(&w, COORD_WIRE_VERSION);
  w_u8(&w, m->type);
  w_job(&w, &m->job);
  switch (m->type) {
    case COORD_MSG_JOIN:
      w_u32(&w, (uint32_t)m->rank);
      w_u32(&w, (uint32_t)m->size);
      w_u32(&w, m->gen);
      if (m->fusion_bytes > COORD_MAX_FUSION_BYTES || m->cycle_ms > COORD_MAX_CYCLE_MS) {
        free(w.p);
        return FGB_EINVAL;
      }
      w_u64(&w, m->fusion_bytes);
      w_u32(&w, m->cycle_ms);
      w_u32(&w, m->client_uid);
      break;
    case COORD_MSG_LEAVE:
      w_u32(&w, (uint32_t)m->rank);
      w_u8(&w, m->abort ? 1 : 0);
      w_text(&w, m->text);
      break;
    case COORD_MSG_META:
      w_u32(&w, (uint32_t)m->rank);
      w_name(&w, m->meta.name);
      w_u64(&w, m->meta.count);
      w_u8(&w, (uint8_t)m->meta.dtype);
      w_u8(&w, (uint8_t)m->meta.ndim);
      for (uint32_t i = 0; i < m->meta.ndim && i < COORD_MAX_DIMS; i++) w_u64(&w, m->meta.shape[i]);
      w_u64(&w, m->meta.bytes);
      break;
    case COORD_MSG_PRE:
      w_u32(&w, (uint32_t)m->rank);
      w_u8(&w, m->on ? 1 : 0);
      w_u64(&w, m->step);
      break;
    case COORD_MSG_RECALL:
      w_u32(&w, (uint32_t)m->rank);
      break;
    case COORD_MSG_FUSE:
      w_u32(&w, (uint32_t)m->rank);
      w_u8(&w, m->on ? 1 : 0);
      w_u64(&w, m->step);
      if (w_keys(&w, m) != 0) {
        free(w.p);
        return FGB_EINVAL;
      }
      break;
    case COORD_MSG_RECALLED:
      w_u32(&w, (uint32_t)m->rank);
      w_u32(&w, m->recall_id);
      w_u64(&w, m->seq);
      break;
    case COORD_MSG_RECALL_ASK:
    case COORD_MSG_REVOKE:
      w_u64(&w, m->job_key);
      w_u32(&w, m->recall_id);
      if (m->type == COORD_MSG_REVOKE) w_u64(&w, m->seq);
      break;
    case COORD_MSG_READY:
    case COORD_MSG_ISSUE:
    case COORD_MSG_PREISSUE:
      if (m->type == COORD_MSG_READY) {
        w_u32(&w, (uint32_t)m->rank);
      } else {
        w_u64(&w, m->job_key);
        w_u64(&w, m->seq);
      }
      w_u64(&w, m->step);
      if (w_keys(&w, m) != 0) {
        free(w.p);
        return FGB_EINVAL;
      }
      break;
    case COORD_MSG_FORMED:
      w_u64(&w, m->job_key);
      w_u64(&w, m->seq);
      if (m->nranks <= 0 || m->nranks > COORD_MAX_JOB_SIZE || !m->gens) {
        free(w.p);
        return FGB_EINVAL;
      }
      w_u32(&w, (uint32_t)m->nranks);
      for (int32_t i = 0; i < m->nranks; i++) w_u32(&w, (uint32_t)m->ranks[i]);
      for (int32_t i = 0; i < m->nranks; i++) w_u32(&w, m->gens[i]);
      w_u32(&w, m->uid_len > COORD_MAX_UID ? 0 : m->uid_len);
      if (m->uid_len <= COORD_MAX_UID) w_bytes(&w, m->uid, m->uid_len);
      break;
    case COORD_MSG_REFUSED:
      w_u32(&w, (uint32_t)m->rank);
      w_u32(&w, m->gen);
      w_u32(&w, (uint32_t)m->code);
      w_text(&w, m->text);
      break;
    case COORD_MSG_TENSOR_OK:
    case COORD_MSG_MISMATCH:
      w_u64(&w, m->job_key);
      w_u32(&w, m->tensor_key);
      w_name(&w, m->meta.name);
      if (m->type == COORD_MSG_MISMATCH) w_text(&w, m->text);
      break;
    case COORD_MSG_STALL:
      w_u64(&w, m->job_key);
      w_u64(&w, m->step);
      w_u32(&w, m->tensor_key);
      w_name(&w, m->meta.name);
      w_u64(&w, m->waited_ms);
      if (m->nranks < 0 || m->nranks > COORD_MAX_JOB_SIZE) {
        free(w.p);
        return FGB_EINVAL;
      }
      w_u32(&w, (uint32_t)m->nranks);
      for (int32_t i = 0; i < m->nranks; i++) w_u32(&w, (uint32_t)m->ranks[i]);
      w_text(&w, m->text);
      break;
    case COORD_MSG_ABORT:
      w_u64(&w, m->job_key);
      w_u32(&w, m->gen);
      w_u32(&w, (uint32_t)m->failed_rank);
      w_text(&w, m->text);
      break;
    case COORD_MSG_ERROR:
      w_u32(&w, (uint32_t)m->code);
      w_text(&w, m->text);
      break;
    default:
      free(w.p);
      return FGB_EINVAL;
  }
  if (w.oom) {
    free(w.p);
    return FGB_ENOMEM;
  }
  *out = w.p;
  *outlen = w.len;
  return FGB_OK;
}

/* ---- decoding ---------------------------------------------------------------------------- */
typedef struct rbuf {
  const uint8_t *p;
  size_t len, off;
  char *err;
  size_t errlen;
  int bad; /* set once; later reads return zeros, so one check at the end suffices */
} rbuf;

static int r_fail(rbuf *r, const char *what) {
  if (!r->bad)
    coord_fmt(r->err, r->errlen, "control message truncated or invalid at byte %zu: %s", r->off,
              what);
  r->bad = 1;
  return 0;
}

static int r_have(rbuf *r, size_t n, const char *what) {
  if (r->bad) return 0;
  if (r->len - r->off < n) return r_fail(r, what);
  return 1;
}

static uint8_t r_u8(rbuf *r, const char *what) {
  if (!r_have(r, 1, what)) return 0;
  return r->p[r->off++];
}

static uint16_t r_u16(rbuf *r, const char *what) {
  if (!r_have(r, 2, what)) return 0;
  uint16_t v = (uint16_t)(r->p[r->off] | (r->p[r->off + 1] << 8));
  r->off += 2;
  return v;
}

static uint32_t r_u32(rbuf *r, const char *what) {
  if (!r_have(r, 4, what)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)r->p[r->off + i] << (8 * i);
  r->off += 4;
  return v;
}

static uint64_t r_u64(rbuf *r, const char *what) {
  if (!r_have(r, 8, what)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)r->p[r->off + i] << (8 * i);
  r->off += 8;
  return v;
}

/* A name: u8 length 1..255, bytes without NUL. */
static void r_name(rbuf *r, char *dst, const char *what) {
  size_t n = r_u8(r, what);
  if (r->bad) return;
  if (n == 0) {
    r_fail(r, what);
    return;
  }
  if (!r_have(r, n, what)) return;
  if (memchr(r->p + r->off, 0, n)) {
    r_fail(r, what);
    return;
  }
  memcpy(dst, r->p + r->off, n);
  dst[n] = '\0';
  r->off += n;
}

/* A text: u16 length 0..511, bytes (a NUL inside only shortens what is shown). */
static void r_text(rbuf *r, char *dst, const char *what) {
  size_t n = r_u16(r, what);
  if (r->bad) return;
  if (n > COORD_MAX_TEXT) {
    r_fail(r, what);
    return;
  }
  if (!r_have(r, n, what)) return;
  memcpy(dst, r->p + r->off, n);
  dst[n] = '\0';
  r->off += n;
}

static int32_t r_rank(rbuf *r, int32_t lo, int32_t hi, const char *what) {
  uint32_t v = r_u32(r, what);
  if (r->bad) return 0;
  int32_t s = (int32_t)v;
  if (s < lo || s > hi) {
    r_fail(r, what);
    return 0;
  }
  return s;
}

static uint32_t *r_u32_array(rbuf *r, uint32_t n, const char *what) {
  if (r->bad) return NULL;
  if (!r_have(r, (size_t)n * 4, what)) return NULL;
  uint32_t *a = malloc((size_t)n * sizeof *a);
  if (!a) {
    r_fail(r, "out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < n; i++) a[i] = r_u32(r, what);
  return a;
}

fgb_status coord_msg_decode(const uint8_t *p, size_t len, coord_msg *m, char *err, size_t errlen) {
  rbuf r = {p, len, 0, err, errlen, 0};
  coord_msg_init(m, 0);
  if (!p && len) {
    r_fail(&r, "NULL bytes");
    return FGB_EPROTO;
  }
  uint8_t ver = r_u8(&r, "version");
  if (!r.bad && ver != COORD_WIRE_VERSION) {
    coord_fmt(err, errlen, "control message version %u, expected %u", ver, COORD_WIRE_VERSION);
    return FGB_EPROTO;
  }
  m->type = r_u8(&r, "type");
  r_name(&r, m->job.name, "job name");
  m->job.incarnation = r_u64(&r, "job incarnation");
  switch (r.bad ? 0 : m->type) {
    case 0:
      break;
    case COORD_MSG_JOIN:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "JOIN rank");
      m->size = r_rank(&r, 1, COORD_MAX_JOB_SIZE, "JOIN size");
      if (!r.bad && m->rank >= m->size) r_fail(&r, "JOIN rank >= size");
      m->gen = r_u32(&r, "JOIN generation");
      m->fusion_bytes = r_u64(&r, "JOIN fusion bytes");
      if (!r.bad && m->fusion_bytes > COORD_MAX_FUSION_BYTES)
        r_fail(&r, "JOIN fusion bytes > 2^40");
      m->cycle_ms = r_u32(&r, "JOIN cycle ms");
      if (!r.bad && m->cycle_ms > COORD_MAX_CYCLE_MS) r_fail(&r, "JOIN cycle ms > 10000");
      m->client_uid = r_u32(&r, "JOIN uid");
      break;
    case COORD_MSG_LEAVE:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "LEAVE rank");
      m->abort = r_u8(&r, "LEAVE abort");
      if (!r.bad && m->abort > 1) r_fail(&r, "LEAVE abort flag not 0/1");
      r_text(&r, m->text, "LEAVE reason");
      break;
    case COORD_MSG_META:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "META rank");
      r_name(&r, m->meta.name, "META tensor name");
      m->meta.count = r_u64(&r, "META count");
      m->meta.dtype = (fgb_dtype)r_u8(&r, "META dtype");
      if (!r.bad && coord_dtype_size(m->meta.dtype) == 0) r_fail(&r, "META dtype unknown");
      m->meta.ndim = r_u8(&r, "META ndim");
      if (!r.bad && m->meta.ndim > COORD_MAX_DIMS) r_fail(&r, "META ndim > 8");
      for (uint32_t i = 0; !r.bad && i < m->meta.ndim; i++)
        m->meta.shape[i] = r_u64(&r, "META shape");
      m->meta.bytes = r_u64(&r, "META bytes");
      break;
    case COORD_MSG_PRE:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "PRE rank");
      m->on = r_u8(&r, "PRE on");
      if (!r.bad && m->on > 1) r_fail(&r, "PRE on flag not 0/1");
      m->step = r_u64(&r, "PRE step");
      if (!r.bad && (m->step & COORD_STEP_ADHOC)) r_fail(&r, "PRE step in the ad-hoc range");
      break;
    case COORD_MSG_RECALL:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "RECALL rank");
      break;
    case COORD_MSG_FUSE:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "FUSE rank");
      m->on = r_u8(&r, "FUSE on");
      if (!r.bad && m->on > 1) r_fail(&r, "FUSE on flag not 0/1");
      m->step = r_u64(&r, "FUSE step");
      if (!r.bad && (m->step & COORD_STEP_ADHOC)) r_fail(&r, "FUSE step in the ad-hoc range");
      m->nkeys = r_u32(&r, "FUSE key count");
      if (!r.bad && (m->nkeys == 0 || m->nkeys > COORD_MAX_BATCH)) r_fail(&r, "FUSE key count");
      m->keys = r_u32_array(&r, m->nkeys, "FUSE keys");
      break;
    case COORD_MSG_RECALLED:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "RECALLED rank");
      m->recall_id = r_u32(&r, "RECALLED recall id");
      m->seq = r_u64(&r, "RECALLED handed seq");
      if (!r.bad && m->recall_id == 0) r_fail(&r, "RECALLED recall id 0");
      break;
    case COORD_MSG_RECALL_ASK:
    case COORD_MSG_REVOKE:
      m->job_key = r_u64(&r, "RECALL job key");
      m->recall_id = r_u32(&r, "RECALL recall id");
      if (m->type == COORD_MSG_REVOKE) m->seq = r_u64(&r, "REVOKE kept seq");
      if (!r.bad && m->recall_id == 0) r_fail(&r, "RECALL recall id 0");
      break;
    case COORD_MSG_READY:
    case COORD_MSG_ISSUE:
    case COORD_MSG_PREISSUE:
      if (m->type == COORD_MSG_READY) {
        m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "READY rank");
      } else {
        m->job_key = r_u64(&r, "ISSUE job key");
        m->seq = r_u64(&r, "ISSUE seq");
      }
      m->step = r_u64(&r, "step");
      m->nkeys = r_u32(&r, "key count");
      if (!r.bad && (m->nkeys == 0 || m->nkeys > COORD_MAX_BATCH)) r_fail(&r, "key count");
      /* PREISSUE numbers its keys seq, seq + 1, ...: the range must not wrap. */
      if (!r.bad && m->type == COORD_MSG_PREISSUE &&
          (m->seq == 0 || m->seq > UINT64_MAX - m->nkeys || (m->step & COORD_STEP_ADHOC)))
        r_fail(&r, "PREISSUE seq range or step");
      m->keys = r_u32_array(&r, m->nkeys, "keys");
      break;
    case COORD_MSG_FORMED:
      m->job_key = r_u64(&r, "FORMED job key");
      m->seq = r_u64(&r, "FORMED seq");
      m->nranks = r_rank(&r, 1, COORD_MAX_JOB_SIZE, "FORMED size");
      m->ranks = (int32_t *)r_u32_array(&r, (uint32_t)m->nranks, "FORMED world ranks");
      for (int32_t i = 0; !r.bad && i < m->nranks; i++)
        if (m->ranks[i] < 0) r_fail(&r, "FORMED world rank negative");
      m->gens = r_u32_array(&r, (uint32_t)m->nranks, "FORMED join generations");
      m->uid_len = r_u32(&r, "FORMED uid length");
      if (!r.bad && m->uid_len > COORD_MAX_UID) r_fail(&r, "FORMED uid length");
      if (!r.bad && r_have(&r, m->uid_len, "FORMED uid")) {
        memcpy(m->uid, r.p + r.off, m->uid_len);
        r.off += m->uid_len;
      }
      break;
    case COORD_MSG_REFUSED:
      m->rank = r_rank(&r, 0, COORD_MAX_JOB_SIZE - 1, "REFUSED rank");
      m->gen = r_u32(&r, "REFUSED generation");
      m->code = r_rank(&r, -255, 0, "REFUSED code");
      r_text(&r, m->text, "REFUSED text");
      break;
    case COORD_MSG_TENSOR_OK:
    case COORD_MSG_MISMATCH:
      m->job_key = r_u64(&r, "job key");
      m->tensor_key = r_u32(&r, "tensor key");
      r_name(&r, m->meta.name, "tensor name");
      if (m->type == COORD_MSG_MISMATCH) r_text(&r, m->text, "MISMATCH text");
      break;
    case COORD_MSG_STALL:
      m->job_key = r_u64(&r, "STALL job key");
      m->step = r_u64(&r, "STALL step");
      m->tensor_key = r_u32(&r, "STALL tensor key");
      r_name(&r, m->meta.name, "STALL tensor name");
      m->waited_ms = r_u64(&r, "STALL waited");
      m->nranks = r_rank(&r, 0, COORD_MAX_JOB_SIZE, "STALL missing count");
      if (m->nranks > 0) {
        m->ranks = (int32_t *)r_u32_array(&r, (uint32_t)m->nranks, "STALL missing ranks");
        for (int32_t i = 0; !r.bad && i < m->nranks; i++)
          if (m->ranks[i] < 0) r_fail(&r, "STALL missing rank negative");
      }
      r_text(&r, m->text, "STALL text");
      break;
    case COORD_MSG_ABORT:
      m->job_key = r_u64(&r, "ABORT job key");
      m->gen = r_u32(&r, "ABORT generation");
      m->failed_rank = r_rank(&r, -1, COORD_MAX_JOB_SIZE - 1, "ABORT failed rank");
      r_text(&r, m->text, "ABORT text");
      break;
    case COORD_MSG_ERROR:
      m->code = r_rank(&r, -255, 0, "ERROR code");
      r_text(&r, m->text, "ERROR text");
      break;
    default:
      coord_fmt(err, errlen, "control message type %u unknown", m->type);
      r.bad = 1;
      break;
  }
  if (!r.bad && r.off != r.len) {
    coord_fmt(err, errlen, "control message %s has %zu trailing bytes", coord_msg_name(m->type),
              r.len - r.off);
    r.bad = 1;
  }
  if (r.bad) {
    coord_msg_clear(m);
    return FGB_EPROTO;
  }
  return FGB_OK;
}
