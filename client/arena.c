/* client/arena.c — joining a job and registering what the daemon shares with us: host arenas
 * (memfd, sealed against resizing, mapped MAP_SHARED) and the tensors that live inside them. The
 * checks here mirror the daemon's so that a mistake is reported before anything is sent. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* Largest host arena we map: far above any model, far below what overflows offset arithmetic. */
#define CLI_MAX_ARENA_BYTES ((size_t)1 << 40)
#define CLI_MAX_COMPRESSOR_NAME 64
#define CLI_MAX_COMPRESSOR_OPTIONS 1023 /* the compressors' option parser's limit */

CLI_API size_t fgb_dtype_size(fgb_dtype dt) {
  switch (dt) {
    case FGB_FLOAT32:
    case FGB_INT32:
      return 4;
    case FGB_FLOAT16:
    case FGB_BFLOAT16:
      return 2;
    case FGB_FLOAT64:
    case FGB_INT64:
      return 8;
    case FGB_UINT8:
      return 1;
  }
  return 0;
}

CLI_API fgb_status fgb_join(fgb_client *c, const fgb_job_opts *opts) {
  if (c == NULL) return FGB_EINVAL;
  if (opts == NULL) return cli_fail(c, FGB_EINVAL, "opts is NULL (use FGB_JOB_OPTS_INIT)");
  fgb_status s = cli_ready(c);
  if (s) return s;
  if (c->joined) return cli_fail(c, FGB_EINVAL, "this handle already joined a job");
  Fgbuff__V1__JoinJob j = FGBUFF__V1__JOIN_JOB__INIT;
  const char *name;
  if ((s = cli_job_defaults(c, opts, &name, &j.incarnation, &j.rank, &j.size))) return s;
  if (opts->policy != NULL && strlen(opts->policy) > FGB_MAX_NAME)
    return cli_fail(c, FGB_EINVAL, "policy name longer than %d bytes", FGB_MAX_NAME);
  j.name = (char *)name;
  j.policy = (char *)(opts->policy ? opts->policy : "");
  j.keep_state = opts->keep_state != 0;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_JOIN;
  env.join = &j;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  if (s) return s;
  int32_t rr = r->join_reply->rank, rs = r->join_reply->size;
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  if (rs < 1 || rr < 0 || rr >= rs)
    return cli_fail(c, FGB_EPROTO, "fgbuffd accepted an impossible rank %d of %d", rr, rs);
  c->rank = rr;
  c->size = rs;
  c->joined = 1;
  return FGB_OK;
}

CLI_API fgb_status fgb_job_rank(const fgb_client *c, int32_t *rank, int32_t *size) {
  if (c == NULL || rank == NULL || size == NULL) return FGB_EINVAL;
  if (!c->joined) return FGB_EINVAL;
  *rank = c->rank;
  *size = c->size;
  return FGB_OK;
}

void cli_arenas_free(fgb_client *c) {
  for (size_t i = 0; i < c->n_arenas; i++) {
#ifdef FGBUFF_HAVE_CUDA
    if (c->arenas[i].cuda) {
      cli_cuda_arena_free(&c->arenas[i]); /* device memory stays the caller's */
      continue;
    }
#endif
    munmap(c->arenas[i].ptr, c->arenas[i].bytes);
  }
  free(c->arenas);
  c->arenas = NULL;
  c->n_arenas = c->cap_arenas = 0;
}

int cli_grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 8;
  void *p = realloc(*arr, nc * elem);
  if (p == NULL) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

CLI_API fgb_status fgb_arena_alloc_host(fgb_client *c, size_t bytes, fgb_arena *out) {
  if (c == NULL) return FGB_EINVAL;
  if (out == NULL) return cli_fail(c, FGB_EINVAL, "out is NULL");
  if (bytes == 0 || bytes > CLI_MAX_ARENA_BYTES)
    return cli_fail(c, FGB_EINVAL, "arena bytes %zu not in [1, 2^40]", bytes);
  fgb_status s = cli_ready(c);
  if (s) return s;
  if (!c->joined) return cli_fail(c, FGB_EINVAL, "join a job (fgb_join) before registering arenas");
  if (cli_grow((void **)&c->arenas, &c->cap_arenas, c->n_arenas, sizeof(cli_arena)))
    return cli_fail(c, FGB_ENOMEM, "out of memory");
  int fd = memfd_create("fgbuff-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return cli_fail(c, FGB_EIO, "memfd_create: %s", strerror(errno));
  /* Sealed so the size cannot change under the daemon's mapping (a shrink would SIGBUS it). */
  if (ftruncate(fd, (off_t)bytes) < 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    int e = errno;
    close(fd);
    return cli_fail(c, e == ENOSPC || e == ENOMEM ? FGB_ENOMEM : FGB_EIO,
                    "sizing a %zu-byte memfd arena: %s", bytes, strerror(e));
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return cli_fail(c, FGB_ENOMEM, "mmap of a %zu-byte arena: %s", bytes, strerror(e));
  }
  Fgbuff__V1__RegisterArena ra = FGBUFF__V1__REGISTER_ARENA__INIT;
  ra.kind = FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD;
  ra.bytes = bytes;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA;
  env.register_arena = &ra;
  s = cli_call(c, &env, &fd, 1, FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  close(fd); /* the mapping (ours and the daemon's) keeps the memory alive */
  if (s) {
    munmap(p, bytes);
    return s;
  }
  uint32_t id = r->arena_reply->arena_id;
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  c->arenas[c->n_arenas++] = (cli_arena){id, p, bytes, NULL};
  out->id = id;
  out->ptr = p;
  out->bytes = bytes;
  return FGB_OK;
}

CLI_API fgb_status fgb_arena_register_cuda(fgb_client *c, void *dev_ptr, size_t bytes,
                                           fgb_arena *out) {
  if (c == NULL) return FGB_EINVAL;
#ifdef FGBUFF_HAVE_CUDA
  return cli_cuda_register(c, dev_ptr, bytes, out);
#else
  return cli_fail(c, FGB_ENOTSUP, "device arenas are not supported by this build of the client");
#endif
}

const cli_tensor *cli_tensor_find(const fgb_client *c, uint32_t id) {
  for (size_t i = 0; i < c->n_tensors; i++)
    if (c->tensors[i].id == id) return &c->tensors[i];
  return NULL;
}

const cli_arena *cli_arena_find(const fgb_client *c, uint32_t id) {
  for (size_t i = 0; i < c->n_arenas; i++)
    if (c->arenas[i].id == id) return &c->arenas[i];
  return NULL;
}

/* Argument checks that need no daemon; each failure names the field. */
static fgb_status cli_check_desc(fgb_client *c, const fgb_tensor_desc *d) {
  if (d->name == NULL) return cli_fail(c, FGB_EINVAL, "tensor name is NULL");
  size_t nl = strlen(d->name);
  if (nl == 0 || nl > FGB_MAX_NAME)
    return cli_fail(c, FGB_EINVAL, "tensor name must be 1..%d bytes (got %zu)", FGB_MAX_NAME, nl);
  size_t es = fgb_dtype_size(d->dtype);
  if (es == 0)
    return cli_fail(c, FGB_EINVAL, "tensor \"%s\": unknown dtype %d", d->name, (int)d->dtype);
  if (d->count == 0) return cli_fail(c, FGB_EINVAL, "tensor \"%s\": count is 0", d->name);
  if (d->offset % es)
    return cli_fail(c, FGB_EINVAL,
                    "tensor \"%s\": offset %llu is not aligned to the %zu-byte dtype", d->name,
                    (unsigned long long)d->offset, es);
  if (d->ndim > FGB_MAX_DIMS)
    return cli_fail(c, FGB_EINVAL, "tensor \"%s\": ndim %u exceeds %d", d->name, d->ndim,
                    FGB_MAX_DIMS);
  if (d->ndim > 0) {
    uint64_t prod = 1;
    for (uint32_t i = 0; i < d->ndim; i++) {
      if (d->shape[i] == 0 || __builtin_mul_overflow(prod, d->shape[i], &prod))
        return cli_fail(c, FGB_EINVAL, "tensor \"%s\": shape[%u] is 0 or the shape overflows",
                        d->name, i);
    }
    if (prod != d->count)
      return cli_fail(c, FGB_EINVAL, "tensor \"%s\": product of shape %llu != count %llu", d->name,
                      (unsigned long long)prod, (unsigned long long)d->count);
  }
  if (d->op != FGB_OP_AVERAGE && d->op != FGB_OP_SUM)
    return cli_fail(c, FGB_EINVAL, "tensor \"%s\": unknown reduce op %d", d->name, (int)d->op);
  if (d->compressor != NULL && strlen(d->compressor) > CLI_MAX_COMPRESSOR_NAME)
    return cli_fail(c, FGB_EINVAL, "tensor \"%s\": compressor name too long", d->name);
  if (d->compressor_options != NULL && strlen(d->compressor_options) > CLI_MAX_COMPRESSOR_OPTIONS)
    return cli_fail(c, FGB_EINVAL, "tensor \"%s\": compressor_options longer than %d bytes",
                    d->name, CLI_MAX_COMPRESSOR_OPTIONS);
  if (!(d->density >= 0.0 && d->density <= 1.0)) /* also rejects NaN */
    return cli_fail(c, FGB_EINVAL, "tensor \"%s\": density %g not in (0, 1] (0: default)", d->name,
                    d->density);
  const cli_arena *a = cli_arena_find(c, d->arena);
  if (a == NULL)
    return cli_fail(c, FGB_ENOTFOUND, "tensor \"%s\": arena %u was not registered by this client",
                    d->name, d->arena);
  uint64_t bytes, end;
  if (__builtin_mul_overflow(d->count, (uint64_t)es, &bytes) ||
      __builtin_add_overflow(d->offset, bytes, &end) || end > a->bytes)
    return cli_fail(
        c, FGB_EINVAL, "tensor \"%s\": offset %llu + %llu elements run past the %zu-byte arena %u",
        d->name, (unsigned long long)d->offset, (unsigned long long)d->count, a->bytes, a->id);
  return FGB_OK;
}

CLI_API fgb_status fgb_tensor_register(fgb_client *c, const fgb_tensor_desc *desc,
                                       uint32_t *tensor_id) {
  if (c == NULL) return FGB_EINVAL;
  if (desc == NULL || tensor_id == NULL)
    return cli_fail(c, FGB_EINVAL, "desc and tensor_id must not be NULL");
  fgb_status s = cli_check_desc(c, desc);
  if (s) return s;
  if ((s = cli_ready(c))) return s;
  if (cli_grow((void **)&c->tensors, &c->cap_tensors, c->n_tensors, sizeof(cli_tensor)))
    return cli_fail(c, FGB_ENOMEM, "out of memory");
  Fgbuff__V1__RegisterTensor rt = FGBUFF__V1__REGISTER_TENSOR__INIT;
  uint64_t shape[FGB_MAX_DIMS];
  memcpy(shape, desc->shape, sizeof(shape));
  rt.name = (char *)desc->name;
  rt.arena_id = desc->arena;
  rt.offset = desc->offset;
  rt.count = desc->count;
  rt.dtype = (Fgbuff__V1__Dtype)desc->dtype; /* fgb_dtype values are the wire values */
  rt.n_shape = desc->ndim;
  rt.shape = shape;
  rt.op = (Fgbuff__V1__ReduceOp)desc->op;
  rt.compressor = (char *)(desc->compressor ? desc->compressor : "");
  rt.density = desc->density;
  rt.compressor_options = (char *)(desc->compressor_options ? desc->compressor_options : "");
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT, *r = NULL;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_REGISTER_TENSOR;
  env.register_tensor = &rt;
  s = cli_call(c, &env, NULL, 0, FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY, CLI_RPC_TIMEOUT_MS, &r);
  if (s) return s;
  uint32_t id = r->tensor_reply->tensor_id;
  fgbuff__v1__envelope__free_unpacked(r, NULL);
  if (cli_tensor_find(c, id) != NULL)
    return cli_fail(c, FGB_EPROTO, "fgbuffd returned tensor id %u twice", id);
  c->tensors[c->n_tensors++] = (cli_tensor){.id = id, .arena = desc->arena};
  *tensor_id = id;
  return FGB_OK;
}

CLI_API fgb_status fgb_tensor_release(fgb_client *c, uint32_t tensor_id) {
  if (c == NULL) return FGB_EINVAL;
  fgb_status s = cli_ready(c);
  if (s) return s;
  /* The daemon judges the id (its Error names tensor_id); our record goes once it agreed. */
  Fgbuff__V1__ReleaseTensor rt = FGBUFF__V1__RELEASE_TENSOR__INIT;
  rt.tensor_id = tensor_id;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_RELEASE_TENSOR;
  env.release_tensor = &rt;
  s = cli_call_ok(c, &env);
  if (s) return s;
  for (size_t i = 0; i < c->n_tensors; i++) {
    if (c->tensors[i].id == tensor_id) {
      c->tensors[i] = c->tensors[--c->n_tensors];
      break;
    }
  }
  return FGB_OK;
}

CLI_API fgb_status fgb_arena_release(fgb_client *c, fgb_arena *arena) {
  if (c == NULL) return FGB_EINVAL;
  if (arena == NULL) return cli_fail(c, FGB_EINVAL, "arena is NULL");
  fgb_status s = cli_ready(c);
  if (s) return s;
  /* The daemon judges the id and "still holds tensors" (its Error names arena_id). */
  Fgbuff__V1__ReleaseArena ra = FGBUFF__V1__RELEASE_ARENA__INIT;
  ra.arena_id = arena->id;
  Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
  env.body_case = FGBUFF__V1__ENVELOPE__BODY_RELEASE_ARENA;
  env.release_arena = &ra;
  s = cli_call_ok(c, &env);
  if (s) return s;
  size_t i = 0;
  while (i < c->n_arenas && c->arenas[i].id != arena->id) i++;
  if (i == c->n_arenas) /* the daemon released an arena we never recorded */
    return cli_fail(c, FGB_EPROTO, "fgbuffd released arena %u unknown to this client", arena->id);
#ifdef FGBUFF_HAVE_CUDA
  if (c->arenas[i].cuda)
    cli_cuda_arena_free(&c->arenas[i]); /* device memory stays the caller's */
  else
#endif
    munmap(c->arenas[i].ptr, c->arenas[i].bytes);
  c->arenas[i] = c->arenas[--c->n_arenas];
  arena->ptr = NULL;
  arena->bytes = 0;
  return FGB_OK;
}
