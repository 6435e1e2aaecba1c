/* client/ctl/ctl_timeline.h — `fgbuffctl timeline start|stop|dump` (timeline.c). */
#ifndef FGB_CTL_TIMELINE_H
#define FGB_CTL_TIMELINE_H

/* The subcommand's arguments after "timeline"; sock: --socket (NULL: the library's default).
 * Returns fgbuffctl's exit code. */
int ctl_timeline(const char *sock, int argc, char **argv);

#endif
