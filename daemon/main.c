/* daemon/main.c — fgbuffd: command line, MPI bootstrap (world, local index, control-plane
 * addresses), the loop thread (this thread after bootstrap) and the engine thread, signals and an
 * orderly shutdown. See docs/architecture.md for the design and docs/protocol.md for the wire. */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

#include "ctrl.h"
#include "daemon.h"
#include "engine.h"
#include "log.h"
#include "plan_exec.h"
#include "transport.h"
#ifdef FGBUFF_HAVE_CUDA
#include "gpu_srv.h"
#endif

uint64_t srv_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

uint64_t srv_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static void on_tick(uv_timer_t *t) {
  srv *d = t->data;
  coord_tick(d->coord, srv_now_ms());
  srv_coord_drain(d);
  srv_jobs_tick(d);
  static int announced;
  if (!announced && d->cp && srv_ctrl_ready(d->cp)) {
    announced = 1;
    /* world.sh waits for this line (with the pid) from every daemon. */
    LOG_INFO("fgbuffd: ready rank %d of %d socket %s pid %d", d->world_rank, d->world_size,
             d->sock_path, (int)getpid());
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  srv *d = h->data;
  if (d->stopping) return;
  LOG_INFO("signal %d: shutting down", signum);
  d->stopping = 1;
  srv_server_stop(d); /* every client gets Error FGB_ECLOSED "daemon shutting down" */
  srv_ctrl_close(d);
#ifdef FGBUFF_HAVE_CUDA
  if (d->gpu) srv_gpu_stop(d);
#endif
  uv_timer_stop(&d->tick);
  uv_close((uv_handle_t *)&d->tick, NULL);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  /* Closing the handles restores the default action: a second SIGTERM (systemd, world_stop) must
   * not kill us in the middle of the orderly stop. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  eng_close_async(d->eng);
}

/* MPI_Finalize waits for every rank; if the others keep running it could wait forever. */
static void *finalize_watchdog(void *arg) {
  (void)arg;
  sleep(30);
  LOG_WARN("MPI_Finalize did not return within 30 s (other ranks still running); exiting");
  _exit(0);
  return NULL;
}

static int mpi_bootstrap(srv *d) {
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "fgbuffd: MPI_Init_thread failed (start CPU daemons with mpirun)\n");
    return -1;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    fprintf(stderr,
            "fgbuffd: this MPI provides thread level %d; fgbuffd needs "
            "MPI_THREAD_SERIALIZED (%d)\n",
            provided, MPI_THREAD_SERIALIZED);
    MPI_Finalize();
    return -1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &d->world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d->world_size);
  MPI_Comm node;
  d->local_index = 0;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->world_rank, MPI_INFO_NULL,
                          &node) == MPI_SUCCESS) {
    MPI_Comm_rank(node, &d->local_index);
    MPI_Comm_free(&node);
  }
  return 0;
}

int main(int argc, char **argv) {
  static srv d;
  char err[1024];
  int rc = srv_config_parse(&d.cfg, argc, argv, err, sizeof(err));
  if (rc == 1) return 0;
  if (rc != 0) {
    fprintf(stderr, "fgbuffd: %s\n", err);
    return 2;
  }
  srv_log_set_level(d.cfg.log_level);
  if (srv_config_runtime_dir(&d.cfg, err, sizeof(err)) != FGB_OK) {
    fprintf(stderr, "fgbuffd: %s\n", err);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  if (mpi_bootstrap(&d) != 0) return 1;
  srv_log_set_rank(d.world_rank);
  d.start_ms = srv_now_ms();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  d.daemon_id = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16) ^
                (uint64_t)d.world_rank;
  d.loop = uv_default_loop();

  /* Control-plane addresses are exchanged on this thread before the engine takes over MPI. */
  char addr[CTRL_ADDR_MAX];
  memset(addr, 0, sizeof(addr));
  char *addrs = calloc((size_t)d.world_size, CTRL_ADDR_MAX);
  if (!addrs || srv_ctrl_listen(&d, addr, err, sizeof(err)) != FGB_OK ||
      MPI_Allgather(addr, CTRL_ADDR_MAX, MPI_CHAR, addrs, CTRL_ADDR_MAX, MPI_CHAR,
                    MPI_COMM_WORLD) != MPI_SUCCESS) {
    LOG_ERROR("control plane bootstrap failed: %s", addrs ? err : "out of memory");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  /* The control plane's secret: random on rank 0, known to the world through MPI only. */
  uint8_t token[CTRL_TOKEN] = {0};
  if (d.world_rank == 0 && getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token)) {
    LOG_ERROR("getrandom failed");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (MPI_Bcast(token, CTRL_TOKEN, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
    LOG_ERROR("control plane bootstrap failed: MPI_Bcast");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  coord_config cc = {.world_rank = d.world_rank,
                     .world_size = d.world_size,
                     .stall_ms = d.cfg.stall_timeout_ms,
                     .fusion_bytes = SRV_FUSION_BYTES}; /* "fusion" jobs; see plan_exec.h */
  d.coord = coord_new(&cc);
#ifdef FGBUFF_HAVE_CUDA
  if (d.coord && strncmp(d.cfg.device, "cuda:", 5) == 0 &&
      srv_gpu_start(&d, d.coord, err, sizeof(err)) != FGB_OK) {
    LOG_ERROR("%s", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
#endif
  if (!d.coord) {
    LOG_ERROR("cannot create the coordinator");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (srv_server_start(&d, err, sizeof(err)) != FGB_OK ||
      srv_ctrl_connect(&d, addrs, token, err, sizeof(err)) != FGB_OK ||
#ifdef FGBUFF_HAVE_CUDA
      (d.gpu ? srv_gpu_engine_start(&d, err, sizeof(err)) :
#else
      (
#endif
             eng_start(d.loop, &comm_mpi_ops, srv_engine_result, &d, &d.eng, err, sizeof(err))) !=
          FGB_OK) {
    LOG_ERROR("%s", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  LOG_INFO(
      "world rank %d of %d, local index %d, device %s, socket %s, control plane %s, "
      "leader %s",
      d.world_rank, d.world_size, d.local_index, d.cfg.device, d.sock_path, addr, addrs);
  free(addrs);
#ifdef FGBUFF_HAVE_CUDA
  if (d.gpu) srv_gpu_announce(&d);
#endif
  uv_timer_init(d.loop, &d.tick);
  d.tick.data = &d;
  uv_timer_start(&d.tick, on_tick, 100, 100);
  uv_signal_init(d.loop, &d.sigterm);
  uv_signal_init(d.loop, &d.sigint);
  d.sigterm.data = d.sigint.data = &d;
  uv_signal_start(&d.sigterm, on_signal, SIGTERM);
  uv_signal_start(&d.sigint, on_signal, SIGINT);

  uv_run(d.loop, UV_RUN_DEFAULT);

  int clean = eng_stop(d.eng, 5000) == 0;
  d.eng = NULL;
  if (!clean) {
    /* The engine may still read and write arenas: leave them mapped and MPI alone. */
    LOG_WARN("engine stuck in a collective; exiting without MPI_Finalize");
    return 0;
  }
  while (d.jobs) { /* no client left and the engine stopped: free what remains */
    srv_job *j = d.jobs;
    j->inflight = 0;
    j->aborted = 1;
    srv_job_maybe_release(&d, j);
  }
  coord_free(d.coord);
  free(d.tensors);
  uv_loop_close(d.loop);
  pthread_t wd;
  if (pthread_create(&wd, NULL, finalize_watchdog, NULL) == 0) pthread_detach(wd);
  MPI_Finalize();
  LOG_INFO("stopped");
#ifdef FGBUFF_HAVE_CUDA
  /* The CUDA runtime's exit-time teardown can wait on an observer stream that waits forever on a
   * dead client's event; the driver reclaims everything of an exiting process anyway. */
  if (d.gpu) {
    fflush(NULL);
    _exit(0);
  }
#endif
  return 0;
}
