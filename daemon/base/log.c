/* daemon/base/log.c — level-filtered log lines on stderr (see log.h). One fprintf per line, so
 * lines of the loop and engine threads never interleave mid-line. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
  fprintf(stderr, "%02d:%02d:%02d.%03ld fgbuffd[%d] %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000, atomic_load(&g_rank), names[level], msg);
}
