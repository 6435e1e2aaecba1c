/* client/admin.c — the daemon's status document, live configuration, compressor state transfer
 * and the names of status codes: round trips that fgbuffctl and checkpointing code use. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CLI_MAX_KEY 256
#define CLI_MAX_VALUE 4096

CLI_API const char *fgb_strerror(fgb_status s) {
  switch (s) {
    case FGB_OK:
      return "FGB_OK: success";
    case FGB_EINVAL:
      return "FGB_EINVAL: invalid argument";
    case FGB_ENOMEM:
      return "FGB_ENOMEM: out of memory";
    case FGB_EIO:
      return "FGB_EIO: input/output error";
    case FGB_EPROTO:
      return "FGB_EPROTO: protocol error";
    case FGB_ENOTFOUND:
      return "FGB_ENOTFOUND: not found";
    case FGB_EEXIST:
      return "FGB_EEXIST: already exists";
    case FGB_ETIMEDOUT:
      return "FGB_ETIMEDOUT: timed out";
    case FGB_EPEER:
      return "FGB_EPEER: another rank of the job failed";
    case FGB_ECLOSED:
      return "FGB_ECLOSED: connection closed";
    case FGB_ENOTSUP:
      return "FGB_ENOTSUP: not supported";
    case FGB_EMISMATCH:
      return "FGB_EMISMATCH: cross-rank metadata mismatch";
    case FGB_EAGAIN:
      return "FGB_EAGAIN: not complete yet";
    case FGB_EPERM:
      return "FGB_EPERM: permission denied";
    case FGB_EBUSY:
      return "FGB_EBUSY: in use";
  }
  return "unknown fgb_status";
}

static char *cli_strdup(fgb_client *c, const char *s, fgb_status *st) {
  char *d = strdup(s ? s : "");
  *st = d ? FGB_OK : cli_fail(c, FGB_ENOMEM, "out of memory");
  return d;
}

static fgb_status cli_status(fgb_client *c, char **json, char **text, int metrics,
                             const fgb_status_opts *o) {
  if (c == NULL) return FGB_EINVAL;
  if ((json == NULL) == (text == NULL)) return cli_fail(c, FGB_EINVAL, "output pointer is NULL");
  if (o && o->job && strlen(o->job) > 255)
    return cli_fail(c, FGB_EINVAL, "status: job name longer than 255 bytes");
  fgb_status s = cli_ready(c);
  if (s) return s;
  Fgbuff__V1__StatusRequest m = FGBUFF__V1__STATUS_REQUEST__INIT;
  m.metrics = metrics;
  if (o) {
    m.job = (char *)(o->job ? o->job : "");
    m.offset = o->offset;
    m.limit = o->limit;
  }
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS;
  env.status = &m;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  if (s) return s;
  if (json)
    *json = cli_strdup(c, r->status_reply->json, &s);
  else
    *text = cli_strdup(c, r->status_reply->text, &s);
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  return s;
}

CLI_API fgb_status fgb_status_json(fgb_client *c, char **json) {
  return cli_status(c, json, NULL, 0, NULL);
}

CLI_API fgb_status fgb_status_text(fgb_client *c, char **text) {
  return cli_status(c, NULL, text, 0, NULL);
}

CLI_API fgb_status fgb_status_query(fgb_client *c, const fgb_status_opts *opts, int json,
                                    char **out) {
  if (c != NULL && out == NULL) return cli_fail(c, FGB_EINVAL, "out is NULL");
  return json ? cli_status(c, out, NULL, 0, opts) : cli_status(c, NULL, out, 0, opts);
}

CLI_API fgb_status fgb_metrics_text(fgb_client *c, char **text) {
  return cli_status(c, NULL, text, 1, NULL);
}

CLI_API fgb_status fgb_metrics_query(fgb_client *c, const fgb_status_opts *opts, char **text) {
  return cli_status(c, NULL, text, 1, opts);
}

static fgb_status cli_check_key(fgb_client *c, const char *key, const char *value) {
  if (key == NULL || key[0] == '\0' || strlen(key) > CLI_MAX_KEY)
    return cli_fail(c, FGB_EINVAL, "config key must be 1..%d bytes", CLI_MAX_KEY);
  if (value != NULL && strlen(value) > CLI_MAX_VALUE)
    return cli_fail(c, FGB_EINVAL, "config value longer than %d bytes", CLI_MAX_VALUE);
  return FGB_OK;
}

/* One ConfigGet round trip: a key's value, or (list) every key's line; the reply's text in *out. */
static fgb_status config_get(fgb_client *c, const char *key, int list, char **out) {
  fgb_status s = cli_ready(c);
  if (s) return s;
  Fgbuff__V1__ConfigGet m = FGBUFF__V1__CONFIG_GET__INIT;
  m.key = (char *)key;
  m.list = list;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_CONFIG_GET;
  env.config_get = &m;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  if (s) return s;
  *out = cli_strdup(c, r->config_reply->value, &s);
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  return s;
}

CLI_API fgb_status fgb_config_get(fgb_client *c, const char *key, char **value_out) {
  if (c == NULL) return FGB_EINVAL;
  if (value_out == NULL) return cli_fail(c, FGB_EINVAL, "value_out is NULL");
  fgb_status s = cli_check_key(c, key, NULL);
  return s ? s : config_get(c, key, 0, value_out);
}

CLI_API fgb_status fgb_config_list(fgb_client *c, char **text) {
  if (c == NULL) return FGB_EINVAL;
  if (text == NULL) return cli_fail(c, FGB_EINVAL, "text is NULL");
  return config_get(c, "", 1, text);
}

CLI_API fgb_status fgb_config_set(fgb_client *c, const char *key, const char *value) {
  if (c == NULL) return FGB_EINVAL;
  if (value == NULL) return cli_fail(c, FGB_EINVAL, "config value is NULL");
  fgb_status s = cli_check_key(c, key, value);
  if (s || (s = cli_ready(c))) return s;
  Fgbuff__V1__ConfigSet m = FGBUFF__V1__CONFIG_SET__INIT;
  m.key = (char *)key;
  m.value = (char *)value;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_CONFIG_SET;
  env.config_set = &m;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  if (r) fgbuff__v1__envelope__free_unpacked(r, NULL);
  return s;
}

/* A chunked state transfer's bytes per frame: the rest holds the envelope and the other fields. */
#define CLI_STATE_CHUNK (FGB_WIRE_MAX_FRAME - 1024u)

/* One StateExport round trip; *out gets the reply envelope (free it). */
static fgb_status state_call(fgb_client *c, Fgbuff__V1__StateExport *m,
                             Fgbuff__V1__Envelope **out) {
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_STATE_EXPORT;
  env.state_export = m;
  return cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_STATE_REPLY, CLI_RPC_TIMEOUT_MS,
                  out);
}

CLI_API fgb_status fgb_state_export(fgb_client *c, uint32_t tensor_id, void **data, size_t *bytes) {
  if (c == NULL) return FGB_EINVAL;
  if (data == NULL || bytes == NULL) return cli_fail(c, FGB_EINVAL, "data or bytes is NULL");
  fgb_status s = cli_ready(c);
  if (s) return s;
  if (cli_tensor_find(c, tensor_id) == NULL)
    return cli_fail(c, FGB_ENOTFOUND, "tensor id %u was not registered through this handle",
                    tensor_id);
  /* Chunked: the first reply says the whole size (total; 0 from a daemon that does not chunk,
   * whose one reply is the whole state) and names the daemon's copy for the next chunks. */
  Fgbuff__V1__StateExport m = FGBUFF__V1__STATE_EXPORT__INIT;
  m.tensor_id = tensor_id;
  m.chunked = 1;
  Fgbuff__V1__Envelope *r = NULL;
  if ((s = state_call(c, &m, &r)) != FGB_OK) return s;
  const Fgbuff__V1__StateReply *sr = r->state_reply;
  size_t total = sr->total ? (size_t)sr->total : sr->state.len, have = 0;
  uint8_t *p = malloc(total ? total : 1);
  if (p == NULL) {
    fgbuff__v1__envelope__free_unpacked(r, NULL);
    return cli_fail(c, FGB_ENOMEM, "out of memory for %zu bytes of state", total);
  }
  for (;;) {
    sr = r->state_reply;
    if (sr->total &&
        (sr->total != total || sr->offset != have || sr->state.len > total - have ||
         (!sr->done && sr->state.len == 0) || (sr->done && have + sr->state.len != total))) {
      fgbuff__v1__envelope__free_unpacked(r, NULL);
      free(p);
      return cli_fail(c, FGB_EPROTO,
                      "tensor %u: the daemon's state chunk at %llu (%zu of %zu bytes read) does "
                      "not continue the state",
                      tensor_id, (unsigned long long)sr->offset, have, total);
    }
    if (sr->state.len) memcpy(p + have, sr->state.data, sr->state.len);
    have += sr->state.len;
    int done = !sr->total || sr->done;
    m.export_id = sr->export_id;
    fgbuff__v1__envelope__free_unpacked(r, NULL);
    r = NULL;
    if (done) break;
    m.offset = have;
    if ((s = state_call(c, &m, &r)) != FGB_OK) {
      free(p);
      return s;
    }
  }
  *data = p;
  *bytes = total;
  return FGB_OK;
}

CLI_API fgb_status fgb_state_import(fgb_client *c, uint32_t tensor_id, const void *data,
                                    size_t bytes) {
  if (c == NULL) return FGB_EINVAL;
  if (data == NULL && bytes > 0) return cli_fail(c, FGB_EINVAL, "data is NULL");
  fgb_status s = cli_ready(c);
  if (s) return s;
  if (cli_tensor_find(c, tensor_id) == NULL)
    return cli_fail(c, FGB_ENOTFOUND, "tensor id %u was not registered through this handle",
                    tensor_id);
  Fgbuff__V1__StateImport m = FGBUFF__V1__STATE_IMPORT__INIT;
  m.tensor_id = tensor_id;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_STATE_IMPORT;
  env.state_import = &m;
  if (bytes <= CLI_STATE_CHUNK) { /* one frame, as every daemon reads it */
    m.state.data = (uint8_t *)data;
    m.state.len = bytes;
    return cli_call_ok(c, &env);
  }
  /* In chunks, in order: each is answered Ok but the last, whose answer is the import's. */
  m.total = bytes;
  for (size_t off = 0; off < bytes; off += CLI_STATE_CHUNK) {
    m.offset = off;
    m.state.data = (uint8_t *)data + off;
    m.state.len = bytes - off < CLI_STATE_CHUNK ? bytes - off : CLI_STATE_CHUNK;
    if ((s = cli_call_ok(c, &env)) != FGB_OK) return s;
  }
  return FGB_OK;
}

/* ---- timeline ------------------------------------------------------------------------------- */

static void tl_stats_of(const Fgbuff__V1__TimelineReply *r, fgb_timeline_stats *st) {
  if (!st) return;
  st->recording = r->recording;
  st->capacity = r->capacity;
  st->spans = r->spans;
  st->dropped = r->dropped;
}

/* One TimelineRequest round trip; *out gets the reply envelope (free it). */
static fgb_status tl_call(fgb_client *c, Fgbuff__V1__TimelineRequest *m,
                          Fgbuff__V1__Envelope **out) {
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_TIMELINE;
  env.timeline = m;
  fgb_status s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_TIMELINE_REPLY,
                          CLI_RPC_TIMEOUT_MS, out);
  /* A daemon older than the message answers that the envelope has no body it knows. */
  if (s == FGB_EPROTO && strstr(fgb_client_error(c), "body:"))
    return cli_fail(c, FGB_ENOTSUP,
                    "this fgbuffd does not record timelines (it is older than "
                    "the client library)");
  return s;
}

static fgb_status tl_action(fgb_client *c, Fgbuff__V1__TimelineAction a, uint32_t capacity,
                            fgb_timeline_stats *st) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s) return s;
  Fgbuff__V1__TimelineRequest m = FGBUFF__V1__TIMELINE_REQUEST__INIT;
  m.action = a;
  m.capacity = capacity;
  Fgbuff__V1__Envelope *r = NULL;
  if ((s = tl_call(c, &m, &r)) != FGB_OK) return s;
  tl_stats_of(r->timeline_reply, st);
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  return FGB_OK;
}

CLI_API fgb_status fgb_timeline_start(fgb_client *c, uint32_t capacity, fgb_timeline_stats *st) {
  return tl_action(c, FGBUFF__V1__TIMELINE_ACTION__TIMELINE_START, capacity, st);
}

CLI_API fgb_status fgb_timeline_stop(fgb_client *c, fgb_timeline_stats *st) {
  return tl_action(c, FGBUFF__V1__TIMELINE_ACTION__TIMELINE_STOP, 0, st);
}

CLI_API fgb_status fgb_timeline_dump(fgb_client *c, char **json, size_t *len,
                                     fgb_timeline_stats *st) {
  if (c == NULL) return FGB_EINVAL;
  if (json == NULL || len == NULL) return cli_fail(c, FGB_EINVAL, "json or len is NULL");
  fgb_status s = cli_ready(c);
  if (s) return s;
  char *doc = NULL;
  size_t n = 0, cap = 0;
  uint64_t off = 0, id = 0;
  /* FGBUFF_TIMELINE_PAGE_BYTES: smaller pages than a frame (tests page with it; >= 4096). */
  const char *pe = getenv("FGBUFF_TIMELINE_PAGE_BYTES");
  uint32_t page = pe ? (uint32_t)strtoul(pe, NULL, 10) : 0;
  for (;;) {
    Fgbuff__V1__TimelineRequest m = FGBUFF__V1__TIMELINE_REQUEST__INIT;
    m.action = FGBUFF__V1__TIMELINE_ACTION__TIMELINE_DUMP;
    m.offset = off;
    m.dump_id = id;
    m.max_bytes = page;
    Fgbuff__V1__Envelope *r = NULL;
    if ((s = tl_call(c, &m, &r)) != FGB_OK) break;
    const Fgbuff__V1__TimelineReply *p = r->timeline_reply;
    size_t k = strlen(p->json);
    if (p->next_offset <= off && !p->done) { /* no progress: a broken daemon, not a loop */
      fgbuff__v1__envelope__free_unpacked(r, NULL);
      s = cli_fail(c, FGB_EPROTO, "timeline dump: page at offset %llu made no progress",
                   (unsigned long long)off);
      break;
    }
    if (n + k + 1 > cap) {
      size_t nc = (n + k + 1) * 2;
      char *nd = realloc(doc, nc);
      if (!nd) {
        fgbuff__v1__envelope__free_unpacked(r, NULL);
        s = cli_fail(c, FGB_ENOMEM, "out of memory for a %zu-byte timeline", n + k);
        break;
      }
      doc = nd;
      cap = nc;
    }
    memcpy(doc + n, p->json, k);
    n += k;
    doc[n] = 0;
    off = p->next_offset;
    id = p->dump_id;
    int done = p->done;
    tl_stats_of(p, st);
    fgbuff__v1__envelope__free_unpacked(r, NULL);
    if (done) {
      *json = doc;
      *len = n;
      return FGB_OK;
    }
  }
  free(doc);
  return s;
}
