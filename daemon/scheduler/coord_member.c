/* daemon/scheduler/coord_member.c — what every daemon does with the leader's messages: FORMED,
 * ISSUE, REFUSED, TENSOR_OK, MISMATCH, STALL, ABORT, ERROR, RECALL_ASK and REVOKE become events
 * (after checks that keep seqs increasing and world ranks in range), and this daemon's view for
 * status.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

/* ---- leader -> member delivery ------------------------------------------------------------- */
static fgb_status check_world_ranks(coord *c, const coord_msg *m, char *err, size_t errlen) {
  for (int32_t i = 0; i < m->nranks; i++) {
    if (m->ranks[i] >= c->cfg.world_size) {
      coord_fmt(err, errlen, "%s: world rank %d out of range (world size %d)",
                coord_msg_name(m->type), m->ranks[i], c->cfg.world_size);
      return FGB_EPROTO;
    }
  }
  return FGB_OK;
}

static fgb_status check_seq(coord *c, const coord_msg *m, char *err, size_t errlen) {
  if (m->seq <= c->last_seq) {
    coord_fmt(err, errlen, "%s: seq %llu not above the last seq %llu", coord_msg_name(m->type),
              (unsigned long long)m->seq, (unsigned long long)c->last_seq);
    return FGB_EPROTO;
  }
  return FGB_OK;
}

static void stall_clear_issued(coord *c, const coord_msg *m) {
  stall_rec **pp = &c->stalls;
  while (*pp) {
    stall_rec *s = *pp;
    int hit = 0;
    if (s->job_key == m->job_key && s->step == m->step)
      for (uint32_t i = 0; i < m->nkeys && !hit; i++) hit = m->keys[i] == s->key;
    if (hit) {
      *pp = s->next;
      coord_stall_free(s);
      c->nstalls--;
    } else {
      pp = &s->next;
    }
  }
}

fgb_status coord_member_deliver(coord *c, const coord_msg *m, char *err, size_t errlen) {
  coord_event ev;
  local_job *j = coord_find_local(c, &m->job);
  fgb_status st;
  switch (m->type) {
    case COORD_MSG_FORMED: {
      if ((st = check_seq(c, m, err, errlen)) || (st = check_world_ranks(c, m, err, errlen)))
        return st;
      /* Ours if it names this daemon at our rank with our join's generation; else it is the
       * formation of an earlier join of the same id (still delivered: creating the communicator
       * is collective, the daemon takes part even for a client that is gone). */
      int mine = j && j->rank < m->nranks && m->ranks[j->rank] == c->cfg.world_rank &&
                 m->gens[j->rank] == j->gen;
      if (mine && (j->formed || m->nranks != j->size)) {
        coord_fmt(err, errlen, "FORMED for job '%s': %s", m->job.name,
                  j->formed ? "formed twice" : "size disagrees with the join");
        return FGB_EPROTO;
      }
      int *wr = coord_copy_ranks(m->ranks, m->nranks);
      int *wr2 = mine ? coord_copy_ranks(m->ranks, m->nranks) : NULL;
      if (!wr || (mine && !wr2)) {
        free(wr);
        free(wr2);
        return FGB_ENOMEM;
      }
      c->last_seq = m->seq;
      if (mine) {
        j->formed = 1;
        j->job_key = m->job_key;
        j->world_ranks = wr2;
      }
      coord_event_init(&ev, COORD_EV_JOB_FORMED, m);
      ev.job_size = m->nranks;
      ev.world_ranks = wr;
      ev.uid_len = m->uid_len;
      memcpy(ev.uid, m->uid, m->uid_len);
      return coord_push_event(c, &ev);
    }
    case COORD_MSG_ISSUE: {
      if ((st = check_seq(c, m, err, errlen))) return st;
      uint32_t *keys = malloc((size_t)m->nkeys * sizeof *keys);
      if (!keys) return FGB_ENOMEM;
      memcpy(keys, m->keys, (size_t)m->nkeys * sizeof *keys);
      c->last_seq = m->seq;
      if (j) {
        j->issues++;
        j->issued_keys += m->nkeys;
      }
      stall_clear_issued(c, m);
      coord_event_init(&ev, COORD_EV_ISSUE, m);
      ev.ntensors = m->nkeys;
      ev.tensor_keys = keys;
      return coord_push_event(c, &ev);
    }
    case COORD_MSG_PREISSUE: {
      /* One ISSUE event per key, numbered seq, seq + 1, ... (the decoder checked the range). */
      if ((st = check_seq(c, m, err, errlen))) return st;
      uint32_t **keys = calloc(m->nkeys, sizeof *keys);
      for (uint32_t i = 0; keys && i < m->nkeys; i++)
        if (!(keys[i] = malloc(sizeof **keys))) {
          while (i--) free(keys[i]);
          free(keys);
          keys = NULL;
        }
      if (!keys) return FGB_ENOMEM;
      c->last_seq = m->seq + m->nkeys - 1;
      c->pre_items += m->nkeys;
      if (j) {
        j->pre_items += m->nkeys;
        j->issues += m->nkeys;
        j->issued_keys += m->nkeys;
      }
      for (uint32_t i = 0; i < m->nkeys; i++) {
        coord_event_init(&ev, COORD_EV_ISSUE, m);
        ev.seq = m->seq + i;
        ev.pre = 1;
        ev.ntensors = 1;
        ev.tensor_keys = keys[i];
        *keys[i] = m->keys[i];
        st = coord_push_event(c, &ev);
        if (st) { /* the rest cannot be queued either: free them */
          for (uint32_t k = i + 1; k < m->nkeys; k++) free(keys[k]);
          break;
        }
      }
      free(keys);
      return st;
    }
    case COORD_MSG_REFUSED:
      if (j && j->gen != m->gen) return FGB_OK; /* about an earlier join of this id */
      if (j) coord_drop_local(c, j);
      coord_event_init(&ev, COORD_EV_JOIN_REFUSED, m);
      return coord_push_event(c, &ev);
    case COORD_MSG_TENSOR_OK:
      if (j) j->tensors_ok++;
      coord_event_init(&ev, COORD_EV_TENSOR_OK, m);
      return coord_push_event(c, &ev);
    case COORD_MSG_MISMATCH:
      coord_event_init(&ev, COORD_EV_TENSOR_MISMATCH, m);
      return coord_push_event(c, &ev);
    case COORD_MSG_STALL: {
      if ((st = check_world_ranks(c, m, err, errlen))) return st;
      stall_rec *s = NULL;
      if (!c->leader && c->nstalls < COORD_MAX_STALL_RECS) {
        s = calloc(1, sizeof *s);
        if (!s) return FGB_ENOMEM;
        s->missing = coord_copy_ranks(m->ranks, m->nranks);
        if (!s->missing) {
          free(s);
          return FGB_ENOMEM;
        }
      }
      int *miss = coord_copy_ranks(m->ranks, m->nranks);
      if (!miss) {
        if (s) coord_stall_free(s);
        return FGB_ENOMEM;
      }
      if (s) {
        s->job = m->job;
        s->job_key = m->job_key;
        s->step = m->step;
        s->waited_ms = m->waited_ms;
        s->key = m->tensor_key;
        memcpy(s->name, m->meta.name, sizeof s->name);
        s->nmissing = m->nranks;
        s->next = c->stalls;
        c->stalls = s;
        c->nstalls++;
      }
      coord_event_init(&ev, COORD_EV_STALL, m);
      ev.world_ranks = miss;
      ev.nmissing = m->nranks;
      return coord_push_event(c, &ev);
    }
    case COORD_MSG_ABORT:
      /* Another generation: the record is a later join of the same id, made after this daemon
       * left the aborted one; not ours to abort. */
      if (j && j->gen != m->gen) return FGB_OK;
      if (j) coord_drop_local(c, j);
      coord_drop_stalls(c, &m->job);
      coord_event_init(&ev, COORD_EV_JOB_ABORTED, m);
      ev.failed_rank = m->failed_rank;
      return coord_push_event(c, &ev);
    case COORD_MSG_ERROR:
      coord_event_init(&ev, COORD_EV_ERROR, m);
      return coord_push_event(c, &ev);
    case COORD_MSG_RECALL_ASK:
    case COORD_MSG_REVOKE:
      /* Not joined here (any more): the leader ends the round by the LEAVE or ABORT it gets. */
      if (!j || !j->formed || j->job_key != m->job_key) return FGB_OK;
      coord_event_init(&ev, m->type == COORD_MSG_REVOKE ? COORD_EV_REVOKE : COORD_EV_RECALL, m);
      ev.recall_id = m->recall_id;
      return coord_push_event(c, &ev);
    default:
      coord_fmt(err, errlen, "control message %s is not for a member daemon",
                coord_msg_name(m->type));
      return FGB_EPROTO;
  }
}

/* ---- status -------------------------------------------------------------------------------- */
size_t coord_json_putf(char *buf, size_t cap, size_t off, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, fmt, ap);
  va_end(ap);
  return n > 0 ? off + (size_t)n : off;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one. */
static int utf8_len(const unsigned char *p) {
  int n = p[0] < 0xc2 ? 0 : p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : p[0] < 0xf5 ? 4 : 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0;
  if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
  return n;
}

/* A JSON string. Names come from clients: quotes, controls and invalid UTF-8 (as U+FFFD) are
 * escaped so the status stays valid JSON whatever the bytes. */
size_t coord_json_str(char *buf, size_t cap, size_t off, const char *s) {
  off = coord_json_putf(buf, cap, off, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      off = coord_json_putf(buf, cap, off, "\\%c", *p);
    } else if (*p < 0x20 || *p == 0x7f) {
      off = coord_json_putf(buf, cap, off, "\\u%04x", *p);
    } else if (*p < 0x80) {
      off = coord_json_putf(buf, cap, off, "%c", *p);
    } else {
      int n = utf8_len(p);
      if (n == 0) {
        off = coord_json_putf(buf, cap, off, "\\ufffd");
      } else {
        off = coord_json_putf(buf, cap, off, "%.*s", n, (const char *)p);
        p += n - 1;
      }
    }
  }
  return coord_json_putf(buf, cap, off, "\"");
}

size_t coord_status_json(const coord *c, char *buf, size_t cap) {
  if (buf && cap) buf[0] = '\0';
  if (!buf) cap = 0;
  if (!c) return coord_json_putf(buf, cap, 0, "[]");
  if (c->leader) return coord_leader_status(c, buf, cap, 0);
  size_t off = coord_json_putf(buf, cap, 0, "[");
  for (const local_job *j = c->jobs; j; j = j->next) {
    off = coord_json_putf(buf, cap, off, "%s{\"name\":", j == c->jobs ? "" : ",");
    off = coord_json_str(buf, cap, off, j->id.name);
    off = coord_json_putf(buf, cap, off,
                          ",\"incarnation\":%llu,\"key\":%llu,\"size\":%d,\"rank\":%d,"
                          "\"formed\":%s,\"tensors\":%u,\"next_seq\":%llu,"
                          "\"preissued\":%llu,\"issues\":%llu,\"issued_tensors\":%llu,"
                          "\"ranks\":[",
                          (unsigned long long)j->id.incarnation, (unsigned long long)j->job_key,
                          j->size, j->rank, j->formed ? "true" : "false", j->tensors_ok,
                          (unsigned long long)c->last_seq + 1, (unsigned long long)j->pre_items,
                          (unsigned long long)j->issues, (unsigned long long)j->issued_keys);
    for (int i = 0; j->formed && i < j->size; i++)
      off = coord_json_putf(buf, cap, off, "%s%d", i ? "," : "", j->world_ranks[i]);
    off = coord_json_putf(buf, cap, off, "],\"stalls\":[");
    int first = 1;
    for (const stall_rec *s = c->stalls; s; s = s->next) {
      if (!coord_job_eq(&s->job, &j->id)) continue;
      off = coord_json_putf(buf, cap, off,
                            "%s{\"step\":%llu,\"key\":%u,\"tensor\":", first ? "" : ",",
                            (unsigned long long)s->step, s->key);
      off = coord_json_str(buf, cap, off, s->name);
      off = coord_json_putf(buf, cap, off, ",\"waited_ms\":%llu,\"missing\":[",
                            (unsigned long long)s->waited_ms);
      for (int i = 0; i < s->nmissing; i++)
        off = coord_json_putf(buf, cap, off, "%s%d", i ? "," : "", s->missing[i]);
      off = coord_json_putf(buf, cap, off, "]}");
      first = 0;
    }
    off = coord_json_putf(buf, cap, off, "]}");
  }
  return coord_json_putf(buf, cap, off, "]");
}
