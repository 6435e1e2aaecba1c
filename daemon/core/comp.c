/* daemon/core/comp.c — the loop-thread side of compression: a registered tensor's compressor
 * check, the compressor fields of the engine's tensors, and compressor state export / import, which
 * run as ENG_STATE items on the engine thread (it owns the instances, see compress_path.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress_path.h"
#include "compressor.h"
#include "core_internal.h"
#include "engine.h"
#include "err.h"
#include "preissue.h"

/* "a, b, c" of the registered compressors. */
static void names_list(char *out, size_t len) {
  size_t off = 0;
  out[0] = 0;
  for (const char *const *n = comp_names(); *n && off < len; n++) {
    int w = snprintf(out + off, len - off, "%s%s", off ? ", " : "", *n);
    if (w < 0) break;
    off += (size_t)w;
  }
}

/* The 2-D view a low-rank compressor works on: first dimension x the rest (1 x n for vectors);
 * inner: the product of the dimensions after the second (ADTopk's fibres), 1 if none. */
static void view_2d(uint32_t ndim, const uint64_t *shape, uint64_t count, uint64_t *rows,
                    uint64_t *cols, uint64_t *inner) {
  *inner = 1;
  if (ndim >= 2 && shape[0] > 0 && count % shape[0] == 0) {
    *rows = shape[0];
    *cols = count / shape[0];
    if (shape[1] > 0 && *cols % shape[1] == 0) *inner = *cols / shape[1];
  } else {
    *rows = 1;
    *cols = count;
  }
}

fgb_status core_comp_check(const core_job *j, const core_tensor_args *m,
                           const struct comp_ops **out, char *err, size_t errlen) {
  *out = NULL;
  int has_opts = m->options && m->options[0];
  if (!m->compressor || !m->compressor[0] || strcmp(m->compressor, "none") == 0) {
    if (!has_opts) return FGB_OK;
    snprintf(err, errlen,
             "compressor_options: '%.200s' given for a dense tensor (compressor %s); options "
             "need a compressor",
             m->options, m->compressor && m->compressor[0] ? "none" : "\"\"");
    return FGB_EINVAL;
  }
  const comp_ops *ops = comp_find(m->compressor);
  if (!ops) {
    char names[512];
    names_list(names, sizeof(names));
    snprintf(err, errlen, "compressor: unknown compressor '%.64s' (known: %s)", m->compressor,
             names);
    return FGB_EINVAL;
  }
  if (strncmp(j->d->device, "cuda:", 5) == 0 && !(ops->caps & COMP_CAP_CUDA)) {
    /* GPU daemons run compressors on the device (daemon/gpu/sparse.c): CUDA kernels needed. */
    snprintf(err, errlen, "compressor: '%s' has no CUDA implementation in this build", ops->name);
    return FGB_ENOTSUP;
  }
  fgb_dtype dt = m->dtype;
  if (dt != FGB_FLOAT32 && dt != FGB_FLOAT16 && dt != FGB_BFLOAT16) {
    snprintf(err, errlen, "compressor: '%s' needs a floating-point tensor (fp32, fp16, bf16)",
             ops->name);
    return FGB_EINVAL;
  }
  /* A trial instance validates density and shape with the compressor's own checks and words. */
  uint64_t shape[COORD_MAX_DIMS] = {0};
  for (size_t i = 0; i < m->ndim && i < COORD_MAX_DIMS; i++) shape[i] = m->shape[i];
  comp_params p = {.density = m->density,
                   .nranks = j->size,
                   .rank = j->rank,
                   .seed = 1,
                   .buffer_id = 0,
                   .options = has_opts ? m->options : NULL};
  view_2d(m->ndim, shape, m->count, &p.rows, &p.cols, &p.inner);
  comp_exec ex = {0, NULL};
  void *st = NULL;
  char cerr[384];
  cerr[0] = 0;
  fgb_status rc = ops->create(&p, m->count, &ex, &st, cerr, sizeof(cerr));
  if (rc != FGB_OK) {
    /* Blame the options when the same tensor is accepted with the defaults (the parser's text
     * names the option and the compressor). */
    const char *field = strstr(cerr, "density") ? "density" : "compressor";
    if (has_opts && rc != FGB_ENOMEM) {
      comp_params q = p;
      q.options = NULL;
      void *st2 = NULL;
      char e2[64];
      if (ops->create(&q, m->count, &ex, &st2, e2, sizeof(e2)) == FGB_OK) {
        ops->destroy(st2);
        field = "compressor_options";
      }
    }
    snprintf(err, errlen, "%s: compressor '%s': %s", field, ops->name, cerr);
    return rc == FGB_ENOMEM ? FGB_ENOMEM : FGB_EINVAL;
  }
  ops->destroy(st);
  *out = ops;
  return FGB_OK;
}

void core_comp_fill(const core_tensor *t, eng_tensor *et) {
  et->comp = t->comp;
  if (!t->comp) return;
  et->density = t->density;
  et->options = t->options;
  et->key = t->key;
  view_2d(t->ndim, t->shape, t->count, &et->rows, &et->cols, &et->inner);
}

fgb_status core_comp_state_check(core *d, const core_job *j, uint32_t tensor_id, char *err,
                                 size_t errlen) {
  if (!j) return err_set(err, errlen, FGB_EPROTO, "state export/import before joining");
  core_tensor *t = step_tensor_get(d, tensor_id);
  if (!t || t->job != j)
    return err_set(err, errlen, FGB_ENOTFOUND, "tensor_id: %u is not a tensor of this job",
                   tensor_id);
  if (!t->comp)
    return err_set(err, errlen, FGB_EINVAL,
                   "tensor_id: tensor '%s' has no compressor (dense): no state", t->name);
  return FGB_OK;
}

/* The tensor a state request names, or an error sent to the client. */
static core_tensor *state_tensor(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                                 uint32_t tensor_id) {
  char err[256];
  fgb_status st = core_comp_state_check(d, j, tensor_id, err, sizeof err);
  if (st != FGB_OK) {
    core_error(d, s, req_id, st, "tensor_id", "%s", err);
    return NULL;
  }
  core_tensor *t = step_tensor_get(d, tensor_id);
  if (j->aborted || !j->formed || !t->key_known) {
    core_error(
        d, s, req_id, j->aborted ? FGB_EPEER : FGB_EAGAIN, "tensor_id",
        "tensor_id: tensor '%s': %s", t->name,
        j->aborted ? j->abort_text : "the job has not formed or the tensor is not agreed yet");
    return NULL;
  }
  return t;
}

static void state_submit(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                         core_tensor *t, int import, const uint8_t *data, size_t len) {
  eng_item *it = calloc(1, sizeof(*it));
  eng_tensor *et = calloc(1, sizeof(*et));
  void *copy = import && len ? malloc(len) : NULL;
  if (!it || !et || (import && len && !copy)) {
    free(it);
    free(et);
    free(copy);
    core_error(d, s, req_id, FGB_ENOMEM, "", "out of memory");
    return;
  }
  if (copy) memcpy(copy, data, len);
  *et = (eng_tensor){
      .tensor_id = t->id, .ptr = t->ptr, .count = t->count, .dtype = t->dtype, .op = t->op};
  core_comp_fill(t, et);
  it->kind = ENG_STATE;
  it->job_key = j->key;
  it->state_import = import;
  it->req_id = req_id;
  it->state = copy;
  it->state_bytes = len;
  it->n = 1;
  it->t = et;
  j->inflight++;
  pre_eng_submit_now(d, it);
}

void core_comp_on_state(core *d, core_job *j, struct srv_session *s, uint64_t req_id,
                        uint32_t tensor_id, int import, const uint8_t *data, size_t len) {
  core_tensor *t = state_tensor(d, j, s, req_id, tensor_id);
  if (t) state_submit(d, j, s, req_id, t, import, data, len);
}

void core_comp_state_result(core_job *j, eng_item *it) {
  core *d = j->d;
  struct srv_session *s = j->session;
  if (!s) return;
  if (it->status != FGB_OK) {
    core_error(d, s, it->req_id, it->status, "state", "state: %s", it->err);
    return;
  }
  if (it->state_import)
    d->cbs->ok(d->ud, s, it->req_id);
  else
    d->cbs->state(d->ud, s, it->req_id, it->state, it->state_bytes);
}
