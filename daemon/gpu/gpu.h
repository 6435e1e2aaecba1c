/* daemon/gpu/gpu.h — fgbuffd's GPU data plane (built with FGBUFF_HAVE_CUDA): the bound device,
 * CUDA IPC arenas with their event rings, the observer that turns a client's interprocess event
 * into readiness (polled from the loop), and the engine's ISSUE path on device memory (NCCL).
 *
 * Threads: gpu_bind and everything named gpu_arena_* / gpu_observe* run on the loop thread;
 * gpu_engine_ops' hooks run on the engine thread. Both bind the device first (cudaSetDevice). */
#ifndef FGB_GPU_GPU_H
#define FGB_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "fgbuff/client.h"

#define GPU_RING_MAX 1024   /* event slots per arena */
#define GPU_EVENT_HANDLE 64 /* sizeof(cudaIpcEventHandle_t) == sizeof(cudaIpcMemHandle_t) */
#define GPU_PAGE_BYTES 4096 /* a client's done page: */
#define GPU_PAGE_SLOTS 1024 /* ... uint32 numbers, number s in slot s % 1024 */

typedef struct gpu_arena gpu_arena;
struct srv;

/* ---- device.c -------------------------------------------------------------------------------- */
/* Bind "cuda:<index|UUID>" (UUID as nvidia-smi prints it, "GPU-..." prefix optional). */
fgb_status gpu_bind(const char *spec, char *err, size_t errlen);
/* cudaSetDevice to the bound device on the calling thread. */
void gpu_thread_bind(void);
const char *gpu_uuid(void); /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
const char *gpu_pci(void);  /* "0000:19:00.0" */
const char *gpu_name(void);
int gpu_index(void);
/* 1 when this process runs as a client of an MPS server (detected at bind). */
int gpu_mps(void);
/* Bytes of device memory the daemon allocated itself (gauge): everything, and the part that is
 * compressor state (residuals, momenta, low-rank factors; sparse.c says how it is measured). */
void gpu_mem_add(int64_t bytes);
int64_t gpu_mem_used(void);
void gpu_mem_state_add(int64_t bytes);
int64_t gpu_mem_state(void);
/* The largest merge buffer (bytes of one ISSUE's tensors) the engine ran: the non-state memory's
 * bound is GPU_MEM_OTHER_BASE + 2x this. */
#define GPU_MEM_OTHER_BASE (256ll << 20)
void gpu_mem_note_buffer(uint64_t bytes);
uint64_t gpu_mem_largest_buffer(void);
long long gpu_mem_other_bound(void);
/* One line on the GPU memory (compressor state vs the rest, bound), for status's text form
 * (dp_ops.mem_text). */
size_t gpu_mem_text(char *buf, size_t cap);
/* JSON object (no braces' surroundings needed) describing the GPU for status; cut at cap. */
size_t gpu_status_json(char *buf, size_t cap);
/* The coordinator's make_uid (ncclGetUniqueId), on the leader. */
fgb_status gpu_make_uid(void *ud, uint8_t *uid, size_t *len);

/* ---- arena.c --------------------------------------------------------------------------------- */
/* Close the mapping and the events (after every engine item on it finished). */
void gpu_arena_close(gpu_arena *a);
/* Import a client's CUDA IPC allocation (handle: 64 bytes) of `bytes`, on `device_uuid`, with its
 * ring of interprocess events (ev_handles: nslots x 64 bytes). Writes the daemon's ring of done
 * events (nslots x 64 bytes) into done_handles. *field names the bad field on error. */
fgb_status gpu_arena_open(const uint8_t *handle, size_t hlen, const char *device_uuid,
                          uint64_t bytes, const uint8_t *ev_handles, size_t ev_len, gpu_arena **out,
                          void **base, uint8_t **done_handles, size_t *done_len, const char **field,
                          char *err, size_t errlen);
/* Import a client's cuMem/VMM allocations (fds[i]: POSIX fds of RegisterArena kind
 * ARENA_CUDA_VMM_FD, chunk[i] bytes each, mapped in order into one VA range of ours; the arena
 * starts vmm_offset bytes in). The fds stay the caller's. Otherwise as gpu_arena_open. */
fgb_status gpu_arena_open_vmm(const int *fds, int nfds, const uint64_t *chunk, size_t nchunk,
                              uint64_t vmm_offset, const char *device_uuid, uint64_t bytes,
                              const uint8_t *ev_handles, size_t ev_len, gpu_arena **out,
                              void **base, uint8_t **done_handles, size_t *done_len,
                              const char **field, char *err, size_t errlen);
uint32_t gpu_arena_slots(const gpu_arena *a);
/* What the engine signals after a write-back (eng_tensor.done_ev): the page slot of sequence
 * number seq when the arena has a done page and seq != 0, else the done event of `slot`. */
void *gpu_arena_done_sig(gpu_arena *a, uint32_t slot, uint32_t seq);
int gpu_arena_has_page(const gpu_arena *a);
/* Readiness from the page: 1 once the client's stream wrote a ready number at or past seq. */
int gpu_arena_has_ready(const gpu_arena *a);
int gpu_arena_ready_seen(const gpu_arena *a, uint32_t seq);
/* 1 when the driver and GPU support 32-bit stream memory operations on mapped host memory. */
int gpu_memops_supported(void);
/* Map and register the client's done page (fd: a sealed memfd; stays the caller's), with its
 * second half of ready numbers when `ready`. FGB_EINVAL for a bad page (err names done_page),
 * FGB_ENOTSUP when this GPU/driver cannot use it. */
fgb_status gpu_arena_page(gpu_arena *a, int fd, int ready, char *err, size_t errlen);
/* Host-write seq into the page (a failed Done: the client's stream must not wait forever). */
void gpu_arena_page_release(gpu_arena *a, uint32_t seq);
/* Engine thread, after the write-back on `stream`: record the event or write the number (not for
 * a flushed tensor's page signal). */
fgb_status gpu_done_signal(void *sig, int flushed, void *stream, char *err, size_t errlen);
/* Start observing the client's event[slot] (checks the slot); gpu_arena_observed: 1 once the
 * client's GPU passed it (host query, see arena.c for why no stream waits on it), 0 not yet,
 * <0 error. */
fgb_status gpu_arena_observe(gpu_arena *a, uint32_t slot, char *err, size_t errlen);
int gpu_arena_observed(gpu_arena *a, uint32_t slot);

/* ---- issue.c: the engine's hooks, aborted jobs ----------------------------------------------- */
/* The loop marks a job aborted (dp_ops.job_aborted, glue.c's table). */
void gpu_job_aborted(uint64_t job_key);
/* Abort the communicators of every job the loop marked aborted (their collectives end, so a
 * host wait on the stream cannot hang on them). */
void gpu_abort_marked(void);
/* Nonzero once the loop marked the job aborted. */
int gpu_job_is_aborted(uint64_t job_key);
extern eng_gpu_ops gpu_engine_ops; /* .stream is set by gpu_engine_init */
fgb_status gpu_engine_init(char *err, size_t errlen);
/* The engine stream's priority (0 default; FGBUFF_GPU_STREAM_PRIORITY=high: the device's greatest,
 * a negative number), for status. */
int gpu_stream_priority(void);

/* ---- xchg.c: the planning exchange on device memory (eng_gpu_ops.xchg / .timed) -------------- */
fgb_status gpu_xchg(comm *c, uint64_t job_key, const void *send, void *recv, size_t bytes,
                    char *err, size_t errlen);
fgb_status gpu_timed(comm *c, uint64_t job_key, int kind, size_t bytes, double *seconds, char *err,
                     size_t errlen);

/* ---- kernels.cu ------------------------------------------------------------------------------ */
/* x /= div in place on `stream` (fp32, fp64, fp16, bf16). */
fgb_status gpu_scale_div(fgb_dtype dt, void *x, uint64_t n, int div, void *stream);
/* fp16/bf16 -> fp32 and back (round to nearest even) on `stream`; other dtypes are FGB_EINVAL. */
fgb_status gpu_to_f32(fgb_dtype dt, const void *src, float *dst, uint64_t n, void *stream);
fgb_status gpu_from_f32(fgb_dtype dt, const float *src, void *dst, uint64_t n, void *stream);

#endif
