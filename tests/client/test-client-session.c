/* test-client-session: one client session against a scripted fake daemon — default socket path,
 * job defaults from the launcher environment, memfd arena sharing, Done messages buffered while
 * waiting for other replies (out of order, other steps), errors in Done, asynchronous errors
 * surfaced on a later call, a wait timeout, and a daemon that closes the socket mid-wait. */
#include <sys/mman.h>
#include <sys/stat.h>

#include "fgbuff/client.h"
#include "mockd.h"

static void reply(mockd *m, uint64_t req, Fgbuff__V1__Envelope *e) {
  e->req_id = req;
  mockd_send(m, e);
}

static void script(mockd *m) {
  CHECK(mockd_hello(m, 1) == (uint32_t)getpid());

  /* Join: every field from the environment the test set. */
  Fgbuff__V1__Envelope *q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_JOIN);
  CHECK(strcmp(q->join->name, "jobx") == 0);
  CHECK(q->join->rank == 2 && q->join->size == 3);
  CHECK(q->join->incarnation == 777);
  CHECK(strcmp(q->join->policy, "") == 0);
  Fgbuff__V1__JoinReply jr = FGBUFF__V1__JOIN_REPLY__INIT;
  jr.rank = 2;
  jr.size = 3;
  Fgbuff__V1__Envelope e = FGBUFF__V1__ENVELOPE__INIT;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_JOIN_REPLY;
  e.join_reply = &jr;
  reply(m, q->req_id, &e);
  fgbuff__v1__envelope__free_unpacked(q, NULL);

  /* Arena: a sealed memfd of the announced size, shared with the client. */
  int fds[FGB_WIRE_MAX_FDS], nfds = 0;
  q = mockd_recv(m, fds, &nfds);
  REQUIRE(q->body_case == FGBUFF__V1__ENVELOPE__BODY_REGISTER_ARENA);
  CHECK(q->num_fds == 1 && nfds == 1);
  CHECK(q->register_arena->kind == FGBUFF__V1__ARENA_KIND__ARENA_HOST_MEMFD);
  CHECK(q->register_arena->bytes == 4096);
  struct stat st;
  REQUIRE(nfds == 1 && fstat(fds[0], &st) == 0);
  CHECK(st.st_size == 4096);
  int seals = fcntl(fds[0], F_GET_SEALS);
  CHECK(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW));
  float *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  REQUIRE(mem != MAP_FAILED);
  close(fds[0]);
  Fgbuff__V1__ArenaReply ar = FGBUFF__V1__ARENA_REPLY__INIT;
  ar.arena_id = 7;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_ARENA_REPLY;
  e.arena_reply = &ar;
  reply(m, q->req_id, &e);
  fgbuff__v1__envelope__free_unpacked(q, NULL);

  /* Two tensors. */
  for (uint32_t t = 100; t <= 101; t++) {
    q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_REGISTER_TENSOR);
    CHECK(q->register_tensor->arena_id == 7);
    CHECK(q->register_tensor->dtype == FGBUFF__V1__DTYPE__DTYPE_FLOAT32);
    if (t == 101) CHECK(q->register_tensor->n_shape == 2 && q->register_tensor->shape[1] == 4);
    Fgbuff__V1__TensorReply tr = FGBUFF__V1__TENSOR_REPLY__INIT;
    tr.tensor_id = t;
    e.body_case = FGBUFF__V1__ENVELOPE__BODY_TENSOR_REPLY;
    e.tensor_reply = &tr;
    reply(m, q->req_id, &e);
    fgbuff__v1__envelope__free_unpacked(q, NULL);
  }

  /* Step 5: submit of tensor 100, end of step; results written in place, Dones out of order with
   * one for step 6 mixed in. */
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_SUBMIT);
  CHECK(q->submit->tensor_id == 100 && q->submit->step == 5);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_END_STEP);
  CHECK(q->end_step->step == 5);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  for (int i = 0; i < 16; i++) mem[i] *= 2.0f;
  mockd_done(m, 101, 5, 0, "");
  mockd_done(m, 100, 6, 0, "");
  mockd_done(m, 100, 5, 0, "");

  /* A Done arrives while the client waits for its status reply. */
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_STATUS);
  mockd_done(m, 101, 6, 0, "");
  Fgbuff__V1__StatusReply sr = FGBUFF__V1__STATUS_REPLY__INIT;
  sr.json = "{\"jobs\":1}";
  sr.text = "jobs: 1";
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_STATUS_REPLY;
  e.status_reply = &sr;
  reply(m, q->req_id, &e);
  fgbuff__v1__envelope__free_unpacked(q, NULL);

  /* Config: a value, then a refusal naming the key. */
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_CONFIG_GET);
  CHECK(strcmp(q->config_get->key, "log_level") == 0);
  Fgbuff__V1__ConfigReply cr = FGBUFF__V1__CONFIG_REPLY__INIT;
  cr.key = "log_level";
  cr.value = "debug";
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_CONFIG_REPLY;
  e.config_reply = &cr;
  reply(m, q->req_id, &e);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_CONFIG_SET);
  mockd_error(m, q->req_id, -1, "unknown config key \"nope\"", 0);
  fgbuff__v1__envelope__free_unpacked(q, NULL);

  /* An ad-hoc all-reduce: sequence 1. */
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE);
  CHECK(q->collective->kind == FGBUFF__V1__COLLECTIVE_KIND__COLLECTIVE_ALLREDUCE);
  CHECK(q->collective->seq == 1 && q->collective->tensor_id == 100);
  Fgbuff__V1__CollectiveDone cd = FGBUFF__V1__COLLECTIVE_DONE__INIT;
  cd.seq = 1;
  e.body_case = FGBUFF__V1__ENVELOPE__BODY_COLLECTIVE_DONE;
  e.collective_done = &cd;
  reply(m, q->req_id, &e);
  fgbuff__v1__envelope__free_unpacked(q, NULL);

  /* Step 8 fails on a peer; then an asynchronous refusal; then the daemon goes away. */
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_SUBMIT);
  CHECK(q->submit->step == 8);
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  mockd_done(m, 100, 8, -8, "rank 1 of job jobx died");
  mockd_error(m, 0, -6, "rank 2 of job jobx already joined on daemon 0", 0);
  q = mockd_expect(m, FGBUFF__V1__ENVELOPE__BODY_SUBMIT); /* step 9: the daemon closes */
  fgbuff__v1__envelope__free_unpacked(q, NULL);
  munmap(mem, 4096);
}

int main(void) {
  mockd m;
  mockd_start(&m, "cpu1.sock", script);
  setenv("FGBUFF_RUNTIME_DIR", m.dir, 1);
  setenv("FGBUFF_LOCAL_INDEX", "1", 1);
  unsetenv("FGBUFF_SOCKET");
  setenv("FGBUFF_JOB", "jobx", 1);
  unsetenv("FGBUFF_INCARNATION");
  setenv("SLURM_JOB_ID", "777", 1);
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);

  fgb_client *c;
  REQUIRE(fgb_client_new(&c) == FGB_OK);
  REQUIRE(fgb_connect(c, NULL) == FGB_OK);
  fgb_job_opts jo = FGB_JOB_OPTS_INIT;
  REQUIRE(fgb_join(c, &jo) == FGB_OK);
  int32_t r, n;
  CHECK(fgb_job_rank(c, &r, &n) == FGB_OK && r == 2 && n == 3);
  fgb_arena a;
  REQUIRE(fgb_arena_alloc_host(c, 4096, &a) == FGB_OK);
  CHECK(a.id == 7 && a.bytes == 4096);
  fgb_tensor_desc td = FGB_TENSOR_DESC_INIT;
  td.name = "w";
  td.arena = a.id;
  td.count = 16;
  uint32_t tw, tb;
  REQUIRE(fgb_tensor_register(c, &td, &tw) == FGB_OK);
  td.name = "b";
  td.offset = 64;
  td.count = 8;
  td.ndim = 2;
  td.shape[0] = 2;
  td.shape[1] = 4;
  REQUIRE(fgb_tensor_register(c, &td, &tb) == FGB_OK);
  CHECK(tw == 100 && tb == 101);

  float *w = a.ptr;
  for (int i = 0; i < 16; i++) w[i] = (float)i;
  CHECK(fgb_submit(c, tw, 5, NULL) == FGB_OK);
  CHECK(fgb_end_step(c, 5) == FGB_OK);
  CHECK(fgb_wait_step(c, 5, 10000) == FGB_OK);
  int same = 1;
  for (int i = 0; i < 16; i++) same &= w[i] == 2.0f * (float)i;
  CHECK_MSG(same, "the daemon's write-back is not visible in the arena");
  CHECK(fgb_test(c, tw, 6) == FGB_OK); /* buffered while waiting for step 5 */
  CHECK(fgb_test(c, tb, 6) == FGB_EAGAIN);

  char *s = NULL;
  CHECK(fgb_status_json(c, &s) == FGB_OK && s && strcmp(s, "{\"jobs\":1}") == 0);
  free(s);
  CHECK(fgb_wait(c, tb, 6, 10000) == FGB_OK); /* arrived during the status round trip */
  CHECK(fgb_config_get(c, "log_level", &s) == FGB_OK && s && strcmp(s, "debug") == 0);
  free(s);
  CHECK(fgb_config_set(c, "nope", "1") == FGB_EINVAL);
  CHECK(strstr(fgb_client_error(c), "nope") != NULL);
  CHECK(fgb_allreduce(c, tw, FGB_OP_SUM, 10000) == FGB_OK);

  CHECK(fgb_wait(c, tw, 7, 100) == FGB_ETIMEDOUT);
  CHECK(fgb_submit(c, tw, 8, NULL) == FGB_OK);
  CHECK(fgb_wait(c, tw, 8, 10000) == FGB_EPEER);
  CHECK(strstr(fgb_client_error(c), "rank 1 of job jobx died") != NULL);
  /* The asynchronous refusal arrives after the Done; a later call reports it, once. */
  fgb_status st;
  int64_t tries = 0;
  while ((st = fgb_test(c, tw, 99)) == FGB_EAGAIN && tries++ < 1000) usleep(10000);
  CHECK(st == FGB_EEXIST);
  CHECK(strstr(fgb_client_error(c), "already joined") != NULL);
  CHECK(fgb_submit(c, tw, 9, NULL) == FGB_OK);
  /* The fake daemon exits after reading that submit: the wait must end, not hang. */
  CHECK(fgb_wait(c, tw, 9, -1) == FGB_ECLOSED);
  CHECK(strstr(fgb_client_error(c), m.path) != NULL);
  CHECK(fgb_status_json(c, &s) == FGB_ECLOSED);
  mockd_join(&m);
  fgb_client_free(c);
  TEST_DONE();
}
