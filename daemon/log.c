/* daemon/log.c — level-filtered log lines on stderr (see log.h). One fprintf per line, so lines of
 * the loop and engine threads never interleave mid-line. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = SRV_LOG_INFO;
static atomic_int log_rank = -1;
static const char *const names[] = {"debug", "info", "warn", "error"};

void srv_log_set_rank(int rank) {
  atomic_store(&log_rank, rank);
}

void srv_log_set_level(int level) {
  if (level >= SRV_LOG_DEBUG && level <= SRV_LOG_ERROR) atomic_store(&log_level, level);
}

int srv_log_level(void) {
  return atomic_load(&log_level);
}

int srv_log_parse_level(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

const char *srv_log_level_name(int level) {
  return (level >= 0 && level < 4) ? names[level] : "?";
}

void srv_log(int level, const char *fmt, ...) {
  if (level < atomic_load(&log_level)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  fprintf(stderr, "%02d:%02d:%02d.%03ld fgbuffd[%d] %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000, atomic_load(&log_rank), names[level], msg);
}
