/* daemon/log.h — fgbuffd's log: one line per event on stderr, prefixed with the world rank,
 * filtered by a level that can change at run time (ConfigSet log_level). Safe from any thread. */
#ifndef FGB_SRV_LOG_H
#define FGB_SRV_LOG_H

enum { SRV_LOG_DEBUG = 0, SRV_LOG_INFO = 1, SRV_LOG_WARN = 2, SRV_LOG_ERROR = 3 };

void srv_log_set_rank(int rank);
void srv_log_set_level(int level);
int srv_log_level(void);
/* "debug", "info", "warn", "error" -> level, or -1. */
int srv_log_parse_level(const char *s);
const char *srv_log_level_name(int level);

void srv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_DEBUG(...) srv_log(SRV_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) srv_log(SRV_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...) srv_log(SRV_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) srv_log(SRV_LOG_ERROR, __VA_ARGS__)

#endif
