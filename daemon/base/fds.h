/* daemon/base/fds.h — file descriptors received with a message (SCM_RIGHTS) and not kept. */
#ifndef FGB_BASE_FDS_H
#define FGB_BASE_FDS_H

/* Close fds[0..nfds-1]. */
void fds_close(int *fds, int nfds);

#endif
