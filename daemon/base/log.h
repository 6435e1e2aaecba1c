/* daemon/base/log.h — fgbuffd's log: one line per event on stderr, prefixed with the world rank,
 * filtered by a level that can change at run time (ConfigSet log_level). Safe from any thread. */
#ifndef FGB_BASE_LOG_H
#define FGB_BASE_LOG_H

enum { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO = 1, LOG_LEVEL_WARN = 2, LOG_LEVEL_ERROR = 3 };

void log_set_rank(int rank);
void log_set_level(int level);
int log_level(void);
/* "debug", "info", "warn", "error" -> level, or -1. */
int log_parse_level(const char *s);
const char *log_level_name(int level);

void log_line(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_DEBUG(...) log_line(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) log_line(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_WARN(...) log_line(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_ERROR(...) log_line(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
