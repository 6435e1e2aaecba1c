/* boot/main.c — fgbuffd: command line, bootstrap (world, local index, control-plane addresses
 * and secret: by MPI under a launcher, or by --rendezvous without MPI for GPU daemons), the loop
 * thread (this thread after bootstrap) and the engine thread, signals and an orderly shutdown.
 * See docs/architecture.md for the design and docs/protocol.md for the wire. */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "ctrl.h"
#include "daemon.h"
#include "engine.h"
#include "env.h"
#include "log.h"
#include "metrics.h"
#include "plan_exec.h"
#include "preissue.h"
#include "rdv_late.h"
#include "rendezvous.h"
#include "service.h"
#include "transport.h"
#ifdef FGBUFF_HAVE_CUDA
#include "glue.h"
#endif

#ifdef FGBUFF_HAVE_CUDA
const int boot_has_cuda = 1;
#else
const int boot_has_cuda = 0;
#endif

/* How long a rendezvous daemon waits for its world (systemd restarts it after a failure). */
#define BOOT_RDV_TIMEOUT_MS 300000

/* The leader's advertised control-plane address, for the formation deadline's message. */
static char leader_addr[CTRL_ADDR_MAX];

static void on_tick(uv_timer_t *t) {
  srv *d = t->data;
  /* Live settings (ConfigSet) reach the coordinator here; the control plane reads its own. */
  coord_set_timeouts(d->core.coord, d->cfg.stall_timeout_ms, d->cfg.formation_timeout_ms);
  core_tick(&d->core, clock_ms());
  server_tick(&d->net);
  static int announced;
  if (!announced && d->net.cp && ctrl_ready(d->net.cp)) {
    announced = 1;
    /* world.sh waits for this line (with the pid) from every daemon. */
    LOG_INFO("fgbuffd: ready rank %d of %d socket %s pid %d", d->world_rank, d->world_size,
             d->net.sock_path, (int)getpid());
  }
  service_tick(d, d->net.cp && ctrl_ready(d->net.cp), leader_addr);
}

/* Fusion cycles (coordinator.c, "Fusion"): the leader holds a fusion job's agreed tensors for its
 * cycle (1 ms by default), much shorter than the 100 ms tick. Before the loop blocks, a one-shot
 * timer is armed for the coordinator's next due time, if any, and ticks it then. */
static uv_prepare_t fuse_prep;
static uv_timer_t fuse_timer;
static uint64_t fuse_at = UINT64_MAX; /* when fuse_timer fires (UINT64_MAX: not armed) */

static uint64_t coord_clock_ms(void *ud) {
  (void)ud;
  return clock_ms();
}

static void on_fuse_timer(uv_timer_t *t) {
  srv *d = t->data;
  fuse_at = UINT64_MAX;
  core_clock(&d->core, clock_ms());
}

static void on_fuse_prepare(uv_prepare_t *p) {
  srv *d = p->data;
  uint64_t due = coord_next_due(d->core.coord);
  if (due == UINT64_MAX || due >= fuse_at) return;
  uint64_t now = clock_ms();
  fuse_at = due;
  uv_timer_start(&fuse_timer, on_fuse_timer, due > now ? due - now : 0, 0);
}

static void on_signal(uv_signal_t *h, int signum) {
  srv *d = h->data;
  if (d->net.stopping) return;
  LOG_INFO("signal %d: shutting down", signum);
  service_notify("STOPPING=1");
  d->net.stopping = 1;
  /* The control plane first: its goodbye tells the peers that this daemon stops in order, so the
   * leader fails this daemon's jobs with "daemon at world rank R (ADDR) stopped (orderly
   * shutdown)" rather than with what the LEAVEs of the closing sessions would say. */
  ctrl_close(&d->net);
  server_stop(&d->net); /* every client gets Error FGB_ECLOSED "daemon shutting down" */
  metrics_close();
#ifdef FGBUFF_HAVE_CUDA
  if (d->core.gpu) glue_stop(d);
#endif
  uv_timer_stop(&d->tick);
  uv_close((uv_handle_t *)&d->tick, NULL);
  uv_prepare_stop(&fuse_prep);
  uv_close((uv_handle_t *)&fuse_prep, NULL);
  uv_timer_stop(&fuse_timer);
  uv_close((uv_handle_t *)&fuse_timer, NULL);
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  /* Closing the handles restores the default action: a second SIGTERM (systemd, world_stop) must
   * not kill us in the middle of the orderly stop. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  eng_close_async(d->core.eng);
}

/* MPI_Finalize waits for every rank; if the others keep running it could wait forever. */
static void *finalize_watchdog(void *arg) {
  (void)arg;
  sleep(30);
  LOG_WARN("MPI_Finalize did not return within 30 s (other ranks still running); exiting");
  _exit(0);
  return NULL;
}

/* What either bootstrap gives the rest of main: the world (in srv), the control-plane addresses
 * and the world's secret. MPI worlds abort through MPI on error; rendezvous worlds just exit. */
typedef struct boot {
  int mpi; /* 1: MPI was initialised (MPI_Abort on errors, MPI_Finalize at exit) */
  char addr[CTRL_ADDR_MAX];
  char *addrs; /* world_size x CTRL_ADDR_MAX */
  uint8_t token[CTRL_TOKEN];
  /* Rank 0 of a rendezvous world: the port kept open after formation (-1: none), the hostnames
   * and the world's key, for the late server (rdv_late.h). */
  int rdv_ls;
  char *hosts;
  uint8_t key[RDV_KEY];
  int keyed;
} boot;

/* Rejoining a rendezvous world (the leader): which ranks the control plane lost, and the one-time
 * token the late rendezvous server gave each lost rank's restarted daemon. The server's thread
 * reads and writes it under mu; so does the loop thread (ctrl_peer_lost, ctrl_rejoin). */
static struct {
  pthread_mutex_t mu;
  int world;
  uint8_t *lost, *pending;
  uint8_t (*tok)[CTRL_TOKEN];
  char (*addr)[CTRL_ADDR_MAX];
} g_rj = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int rejoin_init(int world) {
  g_rj.world = world;
  g_rj.lost = calloc((size_t)world, 1);
  g_rj.pending = calloc((size_t)world, 1);
  g_rj.tok = calloc((size_t)world, CTRL_TOKEN);
  g_rj.addr = calloc((size_t)world, CTRL_ADDR_MAX);
  return g_rj.lost && g_rj.pending && g_rj.tok && g_rj.addr ? 0 : -1;
}

/* The late server's grant (its thread): only a rank the control plane lost may come back. */
static int rejoin_grant(void *ud, int rank, const char *addr, uint8_t token[RDV_TOKEN], char *why,
                        size_t wl) {
  (void)ud;
  int rc = 0;
  pthread_mutex_lock(&g_rj.mu);
  if (rank <= 0 || rank >= g_rj.world || !g_rj.lost[rank])
    rc = snprintf(why, wl,
                  "world rank %d is in the world (its daemon is alive): only a lost rank's "
                  "restarted daemon can rejoin",
                  rank);
  else if (getrandom(g_rj.tok[rank], CTRL_TOKEN, 0) != (ssize_t)CTRL_TOKEN)
    rc = snprintf(why, wl, "rank 0 could not make a token (getrandom)");
  if (rc == 0) {
    memcpy(token, g_rj.tok[rank], RDV_TOKEN);
    snprintf(g_rj.addr[rank], CTRL_ADDR_MAX, "%s", addr);
    g_rj.pending[rank] = 1;
  }
  pthread_mutex_unlock(&g_rj.mu);
  return rc ? -1 : 0;
}

/* The control plane's rejoin hook (loop thread): the hello's token is the one granted, once. */
static int ctrl_rejoin(void *ud, int rank, const uint8_t token[CTRL_TOKEN], char *addr,
                       size_t addrlen) {
  (void)ud;
  int ok = 0;
  pthread_mutex_lock(&g_rj.mu);
  if (g_rj.pending && rank > 0 && rank < g_rj.world && g_rj.pending[rank]) {
    uint8_t diff = 0;
    for (int i = 0; i < CTRL_TOKEN; i++) diff |= token[i] ^ g_rj.tok[rank][i];
    ok = diff == 0;
  }
  if (ok) {
    g_rj.pending[rank] = 0;
    g_rj.lost[rank] = 0;
    snprintf(addr, addrlen, "%s", g_rj.addr[rank]);
  }
  pthread_mutex_unlock(&g_rj.mu);
  return ok;
}

/* A bootstrap failure: the whole MPI world goes down with us; a rendezvous daemon exits 1 (its
 * peers see the control plane close) without the CUDA runtime's exit-time teardown (see below). */
static int fail(const boot *b) {
  if (b->mpi) MPI_Abort(MPI_COMM_WORLD, 1);
  fflush(NULL);
  _exit(1);
}

/* Under a launcher: world and local index from MPI, addresses by MPI_Allgather, the secret (random
 * on rank 0) by MPI_Bcast. */
/* The control plane's bytes go to the coordinator, whose queue is drained after each input. */
static fgb_status ctrl_message(void *ud, int src, const uint8_t *bytes, size_t len, char *err,
                               size_t errlen) {
  return coord_on_message(((srv *)ud)->core.coord, src, bytes, len, err, errlen);
}

static void ctrl_peer_lost(void *ud, int rank, const char *why) {
  if (g_rj.lost && rank > 0 && rank < g_rj.world) {
    pthread_mutex_lock(&g_rj.mu);
    g_rj.lost[rank] = 1;
    g_rj.pending[rank] = 0; /* a token granted before this loss is void */
    pthread_mutex_unlock(&g_rj.mu);
  }
  coord_peer_lost_why(((srv *)ud)->core.coord, rank, why);
}

static void ctrl_after_input(void *ud) {
  core_after_input(&((srv *)ud)->core);
}

static const ctrl_cbs ctrl_up = {ctrl_message, ctrl_peer_lost, ctrl_after_input, ctrl_rejoin};

/* The GPU data plane names the socket (dp_ops' sock_name). */
static int dp_sock_name(void *ud, char *out, size_t cap) {
  srv *d = ud;
  return d->core.dp->sock_name(d, out, cap);
}

/* What net/ needs of the daemon (net.h, srv_net), from the settings and the world as far as they
 * are known: before the control plane listens, and again before the server starts (local index,
 * data plane). */
static void net_config(srv *d) {
  srv_net *n = &d->net;
  n->loop = d->loop;
  n->world_rank = d->world_rank;
  n->world_size = d->world_size;
  n->local_index = d->local_index;
  n->runtime_dir = d->cfg.runtime_dir;
  n->access = d->cfg.access;
  n->allow_uids = d->cfg.allow_uids;
  n->nallow_uids = d->cfg.nallow_uids;
  n->allow_gids = d->cfg.allow_gids;
  n->nallow_gids = d->cfg.nallow_gids;
  n->cp_addr = d->cfg.cp_addr;
  n->cp_port_lo = d->cfg.cp_port_lo;
  n->cp_port_hi = d->cfg.cp_port_hi;
  n->peer_timeout_ms = &d->cfg.peer_timeout_ms;
  n->hot_default = d->core.gpu;
  n->sock_name = d->core.dp ? dp_sock_name : NULL;
  n->sock_name_ud = d;
}

static int boot_mpi(srv *d, boot *b, char *err, size_t errlen) {
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    snprintf(err, errlen, "MPI_Init_thread failed (start CPU daemons with mpirun)");
    return -1;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    snprintf(err, errlen,
             "this MPI provides thread level %d; fgbuffd needs MPI_THREAD_SERIALIZED (%d)",
             provided, MPI_THREAD_SERIALIZED);
    MPI_Finalize();
    return -1;
  }
  b->mpi = 1;
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
  /* Control-plane addresses are exchanged on this thread before the engine takes over MPI. */
  b->addrs = calloc((size_t)d->world_size, CTRL_ADDR_MAX);
  if (!b->addrs) return snprintf(err, errlen, "out of memory"), -1;
  net_config(d);
  if (ctrl_listen(&d->net, &ctrl_up, d, b->addr, err, errlen) != FGB_OK) return -1;
  if (MPI_Allgather(b->addr, CTRL_ADDR_MAX, MPI_CHAR, b->addrs, CTRL_ADDR_MAX, MPI_CHAR,
                    MPI_COMM_WORLD) != MPI_SUCCESS)
    return snprintf(err, errlen, "control plane bootstrap failed: MPI_Allgather"), -1;
  if (d->world_rank == 0 && getrandom(b->token, CTRL_TOKEN, 0) != (ssize_t)CTRL_TOKEN)
    return snprintf(err, errlen, "getrandom failed"), -1;
  if (MPI_Bcast(b->token, CTRL_TOKEN, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    return snprintf(err, errlen, "control plane bootstrap failed: MPI_Bcast"), -1;
  return 0;
}

/* systemd-style (no MPI at all; CPU daemons then use the TCP data plane): world from the flags,
 * addresses, hostnames and the secret through the rendezvous; the local index is our position among
 * the ranks on our host. */
static int boot_rdv(srv *d, boot *b, char *err, size_t errlen) {
  uint8_t key[RDV_KEY];
  char host[RDV_HOST_MAX], kerr[256];
  if (d->cfg.secret_file[0] && rdv_read_key(d->cfg.secret_file, key, kerr, sizeof(kerr)) != FGB_OK)
    return snprintf(err, errlen, "--secret-file: %s", kerr), -1;
  d->world_rank = d->cfg.rank;
  d->world_size = d->cfg.world;
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = 0;
  b->addrs = calloc((size_t)d->world_size, CTRL_ADDR_MAX);
  char *hosts = calloc((size_t)d->world_size, RDV_HOST_MAX);
  if (!b->addrs || !hosts) return free(hosts), snprintf(err, errlen, "out of memory"), -1;
  net_config(d);
  if (ctrl_listen(&d->net, &ctrl_up, d, b->addr, err, errlen) != FGB_OK) return free(hosts), -1;
  LOG_INFO("rendezvous: rank %d of %d at %s%s, waiting up to %d s", d->world_rank, d->world_size,
           d->cfg.rendezvous, d->cfg.secret_file[0] ? " (keyed)" : "", BOOT_RDV_TIMEOUT_MS / 1000);
  rdv_args a = {.hostport = d->cfg.rendezvous,
                .rank = d->world_rank,
                .world = d->world_size,
                .addr = b->addr,
                .host = host,
                .key = d->cfg.secret_file[0] ? key : NULL,
                .timeout_ms = BOOT_RDV_TIMEOUT_MS,
                .keep_listener = d->world_rank == 0 ? &b->rdv_ls : NULL};
  fgb_status st = rdv_exchange(&a, b->addrs, hosts, b->token, err, errlen);
  if (st == FGB_OK) d->local_index = rdv_local_index(hosts, d->world_size, d->world_rank);
  b->hosts = hosts; /* the late server's copy of the table (rank 0) */
  b->keyed = d->cfg.secret_file[0] != 0;
  if (b->keyed) memcpy(b->key, key, RDV_KEY);
  return st == FGB_OK ? 0 : -1;
}

/* CPU worlds formed by the rendezvous: the leader starts each job's TCP bootstrap (comm/tcp.c) and
 * puts its id into FORMED, as GPU worlds do with NCCL's unique id. */
static fgb_status tcp_uid(void *ud, uint8_t *uid, size_t *len) {
  (void)ud;
  char err[256];
  fgb_status st = comm_tcp_ops.make_uid(uid, len, err, sizeof(err));
  if (st != FGB_OK) LOG_ERROR("TCP data plane: cannot start a job's bootstrap: %s", err);
  return st;
}

/* The host part of a control-plane address "IP:PORT": the TCP data plane listens there too. */
static void tcp_bind_addr(const char *cp) {
  char ip[CTRL_ADDR_MAX];
  snprintf(ip, sizeof(ip), "%s", cp);
  char *colon = strrchr(ip, ':');
  if (colon) *colon = 0;
  comm_tcp_set_addr(ip);
}

int main(int argc, char **argv) {
  static srv d;
  char err[1024];
  int rc = config_parse(&d.cfg, argc, argv, err, sizeof(err));
  if (rc == 1) return 0;
  if (rc != 0) {
    fprintf(stderr, "fgbuffd: %s\n", err);
    return 2;
  }
  log_set_level(d.cfg.log_level);
  if (config_runtime_dir(&d.cfg, err, sizeof(err)) != FGB_OK) {
    fprintf(stderr, "fgbuffd: %s\n", err);
    return 1;
  }
  if (service_cp_addr_resolve(d.cfg.cp_addr, sizeof(d.cfg.cp_addr), err, sizeof(err)) != 0) {
    fprintf(stderr, "fgbuffd: %s\n", err);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  d.loop = uv_default_loop();
  boot b = {.rdv_ls = -1};
  if ((d.cfg.rendezvous[0] ? boot_rdv : boot_mpi)(&d, &b, err, sizeof(err)) != 0) {
    LOG_ERROR("%s", err);
    return fail(&b);
  }
  log_set_rank(d.world_rank);
  d.start_ms = clock_ms();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  d.daemon_id = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16) ^
                (uint64_t)d.world_rank;
  coord_config cc = {.world_rank = d.world_rank,
                     .world_size = d.world_size,
                     .stall_ms = d.cfg.stall_timeout_ms,
                     .form_ms = d.cfg.formation_timeout_ms,
                     .fusion_bytes = PLAN_FUSION_BYTES}; /* "fusion" jobs; see plan_exec.h */
  core_init(&d.core, coord_new(&cc), &session_core_cbs, &d);
  d.core.world_rank = d.world_rank;
  d.core.device = d.cfg.device;
  d.core.plan_warmup_steps = &d.cfg.plan_warmup_steps; /* live: ConfigSet changes them */
  d.core.replan_steps = &d.cfg.replan_steps;
  d.core.max_jobs = &d.cfg.max_jobs; /* live, like the limits below */
  d.core.max_tensors_per_job = &d.cfg.max_tensors_per_job;
  d.core.max_job_bytes = &d.cfg.max_job_bytes;
  d.core.max_job_bytes_from = d.cfg.max_job_bytes_from;
  if (d.core.coord) coord_set_recall(d.core.coord, pre_recall_enabled());
#ifdef FGBUFF_HAVE_CUDA
  if (d.core.coord && strncmp(d.cfg.device, "cuda:", 5) == 0 &&
      glue_start(&d, d.core.coord, err, sizeof(err)) != FGB_OK) {
    LOG_ERROR("%s", err);
    return fail(&b);
  }
#endif
  if (!d.core.coord) {
    LOG_ERROR("cannot create the coordinator");
    return fail(&b);
  }
  /* CPU daemons: MPI under a launcher, TCP between the daemons in a rendezvous world */
  const comm_ops *host_ops = &comm_mpi_ops;
  if (!d.core.gpu && d.cfg.rendezvous[0]) {
    host_ops = &comm_tcp_ops;
    tcp_bind_addr(b.addr);
    coord_set_uid_maker(d.core.coord, tcp_uid, &d);
  }
  LOG_INFO("data plane: %s", d.core.gpu ? "cuda (NCCL)" : host_ops->name);
  char jb[512];
  conf_job_bytes(&d.cfg, env_str(ENV_MEM_ROOT), jb, sizeof(jb));
  LOG_INFO("%s", jb);
  LOG_INFO("pre-issue %s (FGBUFF_PREISSUE %.40s), recall %s", pre_enabled(&d.core) ? "on" : "off",
           env_str(ENV_PREISSUE) ? env_str(ENV_PREISSUE) : "unset: on for GPU daemons",
           pre_recall_enabled() ? "on" : "off (FGBUFF_RECALL=0)");
  net_config(&d);
  if (server_start(&d.net, &session_cbs, err, sizeof(err)) != FGB_OK ||
      ctrl_connect(&d.net, b.addrs, b.token, err, sizeof(err)) != FGB_OK ||
#ifdef FGBUFF_HAVE_CUDA
      (d.core.gpu ? glue_engine_start(&d, err, sizeof(err)) :
#else
      (
#endif
                  eng_start(d.loop, host_ops, core_engine_result, &d.core, &d.core.eng, err,
                            sizeof(err))) != FGB_OK) {
    LOG_ERROR("%s", err);
    return fail(&b);
  }
  LOG_INFO(
      "world rank %d of %d, local index %d, device %s, socket %s, control plane %s, "
      "leader %s",
      d.world_rank, d.world_size, d.local_index, d.cfg.device, d.net.sock_path, b.addr, b.addrs);
  snprintf(leader_addr, sizeof(leader_addr), "%.*s", CTRL_ADDR_MAX - 1, b.addrs);
  rdv_late *late = NULL;
  if (b.rdv_ls >= 0) { /* rank 0 of a rendezvous world: lost members may come back */
    rdv_args la = {.rank = 0, .world = d.world_size, .key = b.keyed ? b.key : NULL};
    if (rejoin_init(d.world_size) != 0 ||
        !(late = rdv_late_start(b.rdv_ls, &la, b.addrs, b.hosts, rejoin_grant, NULL, err,
                                sizeof(err)))) {
      LOG_WARN("%s: a lost daemon cannot rejoin this world", g_rj.lost ? err : "out of memory");
      close(b.rdv_ls);
    } else {
      LOG_INFO("rendezvous: %s stays open for restarted members", d.cfg.rendezvous);
    }
  }
  free(b.hosts);
  free(b.addrs);
  if (d.cfg.metrics_listen[0] &&
      metrics_listen(&d, d.cfg.metrics_listen, err, sizeof(err)) != FGB_OK) {
    LOG_ERROR("%s", err);
    return fail(&b);
  }
  timeline_boot(&d);
#ifdef FGBUFF_HAVE_CUDA
  if (d.core.gpu) glue_announce(&d);
#endif
  uv_timer_init(d.loop, &d.tick);
  d.tick.data = &d;
  uv_timer_start(&d.tick, on_tick, 100, 100);
  coord_set_clock(d.core.coord, coord_clock_ms, NULL);
  uv_timer_init(d.loop, &fuse_timer);
  uv_prepare_init(d.loop, &fuse_prep);
  fuse_timer.data = fuse_prep.data = &d;
  uv_prepare_start(&fuse_prep, on_fuse_prepare);
  uv_signal_init(d.loop, &d.sigterm);
  uv_signal_init(d.loop, &d.sigint);
  d.sigterm.data = d.sigint.data = &d;
  uv_signal_start(&d.sigterm, on_signal, SIGTERM);
  uv_signal_start(&d.sigint, on_signal, SIGINT);

  uv_run(d.loop, UV_RUN_DEFAULT);

  rdv_late_stop(late);
  int clean = eng_stop(d.core.eng, 5000) == 0;
  d.core.eng = NULL;
  if (!clean) {
    /* The engine may still read and write arenas: leave them mapped and MPI alone. */
    LOG_WARN("engine stuck in a collective; exiting without MPI_Finalize");
    return 0;
  }
  core_free_jobs(&d.core); /* no client left and the engine stopped: free what remains */
  coord_free(d.core.coord);
  uv_loop_close(d.loop);
  if (b.mpi) {
    pthread_t wd;
    if (pthread_create(&wd, NULL, finalize_watchdog, NULL) == 0) pthread_detach(wd);
    MPI_Finalize();
  }
  service_notify("STATUS=stopped");
  LOG_INFO("stopped");
#ifdef FGBUFF_HAVE_CUDA
  /* The CUDA runtime's exit-time teardown can wait on an observer stream that waits forever on a
   * dead client's event; the driver reclaims everything of an exiting process anyway. */
  if (d.core.gpu) {
    fflush(NULL);
    _exit(0);
  }
#endif
  return 0;
}
