/* daemon/base/log.c — level-filtered log lines on stderr (see log.h). Each line is formatted in
 * full and handed to one write(2), so lines of the loop and engine threads — and of other daemons
 * appending to the same file — never interleave mid-line. (fprintf on unbuffered stderr does not
 * promise that: glibc 2.37+ stages its output 128 bytes at a time and writes each stage.) */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "env.h"

static atomic_int g_level = LOG_LEVEL_INFO;
static atomic_int g_rank = -1;
static const char *const names[] = {"debug", "info", "warn", "error"};

void log_set_rank(int rank) {
  atomic_store(&g_rank, rank);
}

void log_set_level(int level) {
  if (level >= LOG_LEVEL_DEBUG && level <= LOG_LEVEL_ERROR) atomic_store(&g_level, level);
}

int log_level(void) {
  return atomic_load(&g_level);
}

int log_parse_level(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

const char *log_level_name(int level) {
  return (level >= 0 && level < 4) ? names[level] : "?";
}

/* 1 when stderr is the journal ($JOURNAL_STREAM = "dev:ino" of our stderr, set by systemd):
 * lines then start with a syslog priority, "<3>" for errors, so `journalctl -p err` finds them.
 * FGBUFF_LOG_SYSLOG=1|0 forces it: daemons under mpirun write to mpirun's pipe, not the journal.
 * Read with env_peek, outside env's once: env's warnings are log lines themselves. */
static int to_journal(void) {
  static atomic_int cached = -1;
  int v = atomic_load(&cached);
  if (v >= 0) return v;
  const char *js = getenv("JOURNAL_STREAM");
  int force = (int)env_peek(ENV_LOG_SYSLOG); /* 1, 0, or -1: unset or another word */
  unsigned long long dev, ino;
  struct stat st;
  if (force >= 0)
    v = force;
  else
    v = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
        (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
  atomic_store(&cached, v);
  return v;
}

void log_line(int level, const char *fmt, ...) {
  if (level < atomic_load(&g_level)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  static const char *const prio[] = {"<7>", "<6>", "<4>", "<3>"};
  char line[sizeof(msg) + 96];
  int n = snprintf(
      line, sizeof(line), "%s%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ fgbuffd[%d] %s: %s\n",
      to_journal() ? prio[level] : "", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
      tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, atomic_load(&g_rank), names[level], msg);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
  line[len - 1] = '\n'; /* a truncated line still ends its line */
  for (size_t off = 0; off < len;) {
    ssize_t w = write(2, line + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* stderr gone or full: nothing sensible left to do with a log line */
    off += (size_t)w;
  }
}
