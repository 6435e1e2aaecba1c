/* engine/eng_job.c — a job on the engine thread: its communicator (FORM creates it, RELEASE
 * destroys it and logs the heap after), and its tensors' compressor state (STATE export or import,
 * compress_path.h). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "compress_path.h"
#include "eng_plan.h"
#include "engine.h"
#include "engine_internal.h"
#include "env.h"
#include "log.h"

eng_comm *eng_job_find(engine *e, uint64_t key) {
  for (eng_comm *c = e->comms; c; c = c->next)
    if (c->job_key == key) return c;
  return NULL;
}

void eng_job_form(engine *e, eng_item *it) {
  if (eng_job_find(e, it->job_key)) {
    it->status = FGB_EEXIST;
    snprintf(it->err, sizeof(it->err), "job %016llx already has a communicator",
             (unsigned long long)it->job_key);
    return;
  }
  comm_job_spec spec = {.job_key = it->job_key,
                        .job_rank = it->job_rank,
                        .job_size = it->job_size,
                        .uid = it->uid,
                        .uid_len = it->uid_len,
                        .stream = e->gpu ? e->gpu->stream : NULL,
                        .world_ranks = it->world_ranks};
  comm *c = NULL;
  it->status = e->ops->create(&spec, &c, it->err, sizeof(it->err));
  if (it->status != FGB_OK) return;
  int r;
  while ((r = e->ops->ready(c, it->err, sizeof(it->err))) == 0) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  if (r < 0) {
    e->ops->destroy(c);
    it->status = FGB_EIO;
    return;
  }
  eng_comm *ec = calloc(1, sizeof(*ec));
  if (!ec) {
    e->ops->destroy(c);
    it->status = FGB_ENOMEM;
    snprintf(it->err, sizeof(it->err), "out of memory");
    return;
  }
  ec->job_key = it->job_key;
  ec->c = c;
  ec->rank = it->job_rank;
  ec->size = it->job_size;
  ec->stats = eng_stats_new(); /* NULL (out of memory): the job plans from default costs */
  ec->next = e->comms;
  e->comms = ec;
}

/* The process's resident set, kB (/proc/self/statm); 0 where it cannot be read. */
static unsigned long long rss_kb(void) {
  unsigned long long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%llu %llu", &pages, &res) != 2) res = 0;
  fclose(f);
  return res * (unsigned long long)sysconf(_SC_PAGESIZE) / 1024;
}

/* After a job's release (issue 19: the daemon's memory per job): one log line with the heap's
 * bytes in use (mmapped blocks included), the free bytes the allocator keeps in its arenas, and
 * the RSS. With FGBUFF_MALLOC_TRIM=1, malloc_trim(0) first returns every arena's free pages to
 * the system (the line then also gives the RSS before it and the time it took). Under ASan the
 * heap figures are 0 (its allocator is not glibc's). */
static void heap_after_release(uint64_t job_key) {
  int trim = env_num(ENV_MALLOC_TRIM) > 0;
  unsigned long long rss0 = trim ? rss_kb() : 0, t0 = eng_mono_us();
  if (trim) malloc_trim(0);
  unsigned long long trim_us = eng_mono_us() - t0, rss1 = rss_kb();
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  unsigned long long used = (mi.uordblks + mi.hblkhd) / 1024, kept = mi.fordblks / 1024;
#else
  unsigned long long used = 0, kept = 0; /* no mallinfo2: 0 */
#endif
  if (trim)
    LOG_INFO(
        "job %016llx released: heap in use %llu kB, free in the allocator %llu kB; "
        "malloc_trim: RSS %llu -> %llu kB in %llu us",
        (unsigned long long)job_key, used, kept, rss0, rss1, trim_us);
  else
    LOG_INFO(
        "job %016llx released: heap in use %llu kB, free in the allocator %llu kB, RSS %llu kB",
        (unsigned long long)job_key, used, kept, rss1);
}

void eng_job_release(engine *e, eng_item *it) {
  cp_release_job(e->cps, it->job_key);
  if (e->gpu && e->gpu->release) e->gpu->release(it->job_key);
  for (eng_comm **p = &e->comms; *p; p = &(*p)->next) {
    if ((*p)->job_key == it->job_key) {
      eng_comm *ec = *p;
      *p = ec->next;
      e->ops->destroy(ec->c);
      eng_stats_free(ec->stats);
      free(ec);
      break;
    }
  }
  heap_after_release(it->job_key);
}

cp_job eng_job_cp(engine *e, eng_comm *ec) {
  return (cp_job){ec->job_key,  ec->rank, ec->size,  e->ops, ec->c,
                  eng_stop_due, e,        ec->stats, NULL,   0};
}

/* Export or import one tensor's compressor state (after every earlier item of the queue). */
void eng_job_state(engine *e, eng_item *it) {
  eng_comm *ec = eng_job_find(e, it->job_key);
  if (!ec || it->n != 1) {
    it->status = FGB_EINVAL;
    snprintf(it->err, sizeof(it->err), "the job's communicator was not created");
    return;
  }
  if (e->gpu && e->gpu->state) { /* GPU daemons keep compressor state on the device */
    e->gpu->state(ec->c, ec->size, it);
    return;
  }
  cp_job job = eng_job_cp(e, ec);
  if (it->state_import) {
    it->status = cp_state_import(e->cps, &job, &it->t[0], it->state, it->state_bytes, it->err,
                                 sizeof(it->err));
  } else {
    free(it->state);
    it->state = NULL;
    it->state_bytes = 0;
    it->status = cp_state_export(e->cps, &job, &it->t[0], &it->state, &it->state_bytes, it->err,
                                 sizeof(it->err));
  }
}
