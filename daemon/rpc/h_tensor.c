/* daemon/rpc/h_tensor.c — a job's tensors: RegisterTensor (every field checked against the session:
 * its job, its arena, name, dtype, sizes; then the name and the limits, limits_tensor_admit, and
 * core_tensor_register) and ReleaseTensor. */
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "rpc.h"

static fgb_status tensor_check(srv_session *s, const Fgbuff__V1__RegisterTensor *m, core_arena **ao,
                               const char **field, char *err, size_t errlen) {
  core_job *j = s->job;
  *field = "name";
  if (!j) return snprintf(err, errlen, "register_tensor before joining a job"), FGB_EPROTO;
  if (j->refused) {
    *field = j->refuse_field;
    return snprintf(err, errlen, "%s", j->refuse_text), j->refuse_code;
  }
  if (!rpc_name_ok(m->name))
    return snprintf(err, errlen, "name: tensor name must be 1..255 printable bytes"), FGB_EINVAL;
  core_arena *a = s->arenas;
  while (a && a->id != m->arena_id) a = a->next;
  *field = "arena_id";
  if (!a)
    return snprintf(err, errlen, "arena_id: %u is not an arena of this connection", m->arena_id),
           FGB_ENOTFOUND;
  uint32_t esz = dtype_size((fgb_dtype)m->dtype);
  *field = "dtype";
  if (esz == 0) return snprintf(err, errlen, "dtype: unknown dtype %d", (int)m->dtype), FGB_EINVAL;
  *field = "count";
  if (m->count < 1 || m->count > CORE_MAX_COUNT)
    return snprintf(err, errlen, "count: %llu outside 1..2^40", (unsigned long long)m->count),
           FGB_EINVAL;
  *field = "offset";
  if (m->offset % esz)
    return snprintf(err, errlen, "offset: %llu not aligned to the element size %u",
                    (unsigned long long)m->offset, esz),
           FGB_EINVAL;
  if (m->offset > a->bytes || m->count * esz > a->bytes - m->offset)
    return snprintf(err, errlen,
                    "offset: %llu + count %llu x %u bytes lies outside arena %u (%zu bytes)",
                    (unsigned long long)m->offset, (unsigned long long)m->count, esz, a->id,
                    a->bytes),
           FGB_EINVAL;
  *field = "shape";
  if (m->n_shape > COORD_MAX_DIMS)
    return snprintf(err, errlen, "shape: %zu dimensions (at most %d)", m->n_shape, COORD_MAX_DIMS),
           FGB_EINVAL;
  if (m->n_shape > 0) {
    uint64_t prod = 1;
    for (size_t i = 0; i < m->n_shape; i++) {
      if (m->shape[i] == 0 || m->shape[i] > m->count || prod > m->count / m->shape[i]) {
        prod = 0;
        break;
      }
      prod *= m->shape[i];
    }
    if (prod != m->count)
      return snprintf(err, errlen, "shape: product of the dimensions is not count %llu",
                      (unsigned long long)m->count),
             FGB_EINVAL;
  }
  *field = "op";
  if (m->op != 0 && m->op != FGBUFF__V1__REDUCE_OP__REDUCE_OP_AVERAGE &&
      m->op != FGBUFF__V1__REDUCE_OP__REDUCE_OP_SUM)
    return snprintf(err, errlen, "op: unknown reduce op %d", (int)m->op), FGB_EINVAL;
  *field = "density";
  if (!(m->density >= 0.0 && m->density <= 1.0))
    return snprintf(err, errlen, "density: %g outside (0, 1] (0 = default)", m->density),
           FGB_EINVAL;
  fgb_status st = limits_tensor_admit(&s->d->core, j, m->name, m->count * esz, field, err, errlen);
  if (st != FGB_OK) return st;
  *ao = a;
  return FGB_OK;
}

static void on_tensor(srv_session *s, uint64_t req_id, const Fgbuff__V1__RegisterTensor *m) {
  core_arena *a = NULL;
  const char *field;
  char err[512];
  fgb_status st = tensor_check(s, m, &a, &field, err, sizeof(err));
  if (st != FGB_OK) {
    reply_error(s, req_id, st, field, 0, "%s", err);
    return;
  }
  core_tensor_args ta = {.name = m->name,
                         .arena = a,
                         .offset = m->offset,
                         .count = m->count,
                         .dtype = (fgb_dtype)m->dtype,
                         .op = (int)m->op, /* the wire's numbers are fgb_reduce_op's */
                         .compressor = m->compressor,
                         .density = m->density,
                         .options = m->compressor_options,
                         .ndim = (uint32_t)m->n_shape,
                         .shape = m->shape};
  core_tensor_register(&s->d->core, s->job, s, req_id, &ta);
}

/* ReleaseTensor: the tensor leaves its job on this rank at once (EndStep stops flushing it, its
 * name may be registered again). Only between steps: refused (FGB_EBUSY) while it has a step or
 * a collective unfinished here, or the engine holds any work of the job. The coordinator's
 * name -> key agreement lasts as long as the job: a name registered again gets its old key and
 * must keep its count, dtype and shape. Every rank releases it (as every rank registered it), or
 * the ranks that keep it wait for the others in their next step. Static plans are kept per key
 * across steps: their jobs' tensors are refused (FGB_ENOTSUP); a compressed tensor may go, its
 * compressor state staying in the daemon until the job ends. */
static void on_release_tensor(srv_session *s, uint64_t req_id, const Fgbuff__V1__ReleaseTensor *m) {
  srv *d = s->d;
  core_job *j = s->job;
  uint32_t id = m->tensor_id;
  if (!j) {
    reply_error(s, req_id, FGB_EPROTO, "tensor_id", 0,
                "tensor_id %u: no job joined on this connection", id);
    return;
  }
  char err[768];
  fgb_status st = core_tensor_release(&d->core, j, id, err, sizeof(err));
  if (st != FGB_OK) {
    reply_error(s, req_id, st, "tensor_id", 0, "%s", err);
    return;
  }
  reply_ok(s, req_id);
}

void rpc_register_tensor(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_tensor(s, req_id, env->register_tensor);
}

void rpc_release_tensor(srv_session *s, uint64_t req_id, const Fgbuff__V1__Envelope *env) {
  on_release_tensor(s, req_id, env->release_tensor);
}
