/* daemon/rpc/h_admin.c — operating the daemon: Status (the document or Prometheus text), ConfigGet
 * and ConfigSet (conf/settings.c's keys) and the engine's timeline (rpc/timeline.c). A tensor's
 * compressor state (StateExport, StateImport) is h_state.c's. */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "rpc.h"

/* What the Prometheus text may take of a frame: the rest is the envelope's and the framing's. */
#define METRICS_BUDGET (FGB_WIRE_MAX_FRAME - 4096)

static void on_status(srv_session *s, uint64_t req_id, const Fgbuff__V1__StatusRequest *m) {
  char *json = NULL, *text = NULL;
  int metrics = m && m->metrics;
  status_query q = {
      .job = m ? m->job : NULL, .offset = m ? m->offset : 0, .limit = m ? m->limit : 0};
  if (metrics) { /* metrics.c: Prometheus text in .text, no document, cut to fit the frame */
    text = metrics_text(s->d, &q, METRICS_BUDGET);
    json = text ? calloc(1, 1) : NULL;
  }
  if (metrics ? !json : status_build(s->d, &q, &json, &text) != FGB_OK) {
    free(json);
    free(text);
    reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory for the status");
    return;
  }
  Fgbuff__V1__StatusReply r = FGBUFF__V1__STATUS_REPLY__INIT;
  r.json = json;
  r.text = text;
  if (reply_size(req_id, FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY, &r) > FGB_WIRE_MAX_FRAME)
    reply_error(s, req_id, FGB_ENOMEM, "", 0, "status document larger than a frame (%zu bytes)",
                strlen(json) + strlen(text));
  else
    reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY, &r);
  free(json);
  free(text);
}

static void on_config(srv_session *s, uint64_t req_id, const char *key, const char *value) {
  char val[256], err[256];
  fgb_status st = value ? conf_set(&s->d->cfg, key, value, err, sizeof(err)) : FGB_OK;
  if (st == FGB_OK) st = conf_get(&s->d->cfg, key, val, sizeof(val), err, sizeof(err));
  if (st != FGB_OK) {
    reply_error(s, req_id, st, strncmp(err, "value", 5) == 0 ? "value" : "key", 0, "%s", err);
    return;
  }
  if (value) LOG_INFO("config: %s = %s", key, val);
  Fgbuff__V1__ConfigReply r = FGBUFF__V1__CONFIG_REPLY__INIT;
  r.key = (char *)key;
  r.value = val;
  reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY, &r);
}

void rpc_status(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_status(s, req_id, env->status);
}

void rpc_config_get(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  if (env->config_get->list) { /* every key from the one table (fgbuffctl config list) */
    size_t n = conf_list(&s->d->cfg, NULL, 0);
    char *text = malloc(n + 1);
    if (!text) {
      reply_error(s, req_id, FGB_ENOMEM, "", 0, "out of memory for the settings list");
      return;
    }
    conf_list(&s->d->cfg, text, n + 1);
    Fgbuff__V1__ConfigReply r = FGBUFF__V1__CONFIG_REPLY__INIT;
    r.key = (char *)"";
    r.value = text;
    reply_send(s, req_id, FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY, &r);
    free(text);
    return;
  }
  on_config(s, req_id, env->config_get->key, NULL);
}

void rpc_config_set(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_config(s, req_id, env->config_set->key, env->config_set->value);
}

void rpc_timeline(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  timeline_on_request(s, req_id, env->timeline);
}
