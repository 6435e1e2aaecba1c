/* tests/comm/harness.h — P threads of one process acting as the P ranks of TCP communicators
 * (daemon/comm/tcp.c) on 127.0.0.1: forming a job, waiting for requests with a bound, and the
 * data the tests fill and check. */
#ifndef FGB_TESTS_COMM_HARNESS_H
#define FGB_TESTS_COMM_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define H_MAX_RANKS 8

/* One job: the uid its leader made and the key every rank passes. */
typedef struct h_job {
  uint8_t uid[COMM_MAX_UID];
  size_t uid_len;
  uint64_t key;
  int size;
} h_job;

/* make_uid on the calling thread (the job's leader, member or not); 0 or -1 (printed). */
int h_job_make(h_job *j, int size, uint64_t key);
/* create only (the communicator forms on its own; poll ready()); NULL on failure with err. */
comm *h_start(const h_job *j, int rank, char *err, size_t errlen);
/* create + ready within bound_ms; NULL on failure with err filled. */
comm *h_form(const h_job *j, int rank, int bound_ms, char *err, size_t errlen);
/* Poll a request until done or bound_ms; 1 done, negative its error (err), 0 still pending (the
 * request is left in flight). */
int h_wait(comm_req *q, int bound_ms, char *err, size_t errlen);
/* Start fn(rank, arg) on n threads and join them. */
void h_run(int n, void (*fn)(int rank, void *arg), void *arg);
uint64_t h_ms(void);

/* Deterministic data: element i of rank r under seed; floats are small integers (exact sums in
 * any order) unless frac. */
void h_fill(fgb_dtype dt, void *buf, size_t n, int rank, uint64_t seed, int frac);
/* The sum over ranks 0..P-1 of h_fill's data (integers wrap as the transport's). */
void h_ref_sum(fgb_dtype dt, void *out, size_t n, int P, uint64_t seed, int frac);
uint8_t h_byte(int rank, uint64_t seed, size_t i);

#endif
