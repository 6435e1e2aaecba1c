/* daemon/base/fds.c — fds_close (see fds.h). */
#include "fds.h"

#include <unistd.h>

void fds_close(int *fds, int nfds) {
  for (int i = 0; i < nfds; i++) close(fds[i]);
}
