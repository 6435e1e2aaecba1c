/* daemon/base/shmfd.c — refuse a client's memory fd the daemon could fault on (see shmfd.h). The
 * order matters: the type first (F_GET_SEALS on a pipe says nothing useful), then the seals, then
 * the size, which the seals keep from dropping later. */
#include "shmfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "fgbuff/client.h"

static const char *seal_names(int seals, char *buf, size_t n) {
  static const struct {
    int bit;
    const char *name;
  } tab[] = {{F_SEAL_SEAL, "SEAL"},
             {F_SEAL_SHRINK, "SHRINK"},
             {F_SEAL_GROW, "GROW"},
             {F_SEAL_WRITE, "WRITE"}};
  size_t len = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]) && len < n; i++)
    if (seals & tab[i].bit)
      len += (size_t)snprintf(buf + len, n - len, "%sF_SEAL_%s", len ? "|" : "", tab[i].name);
  if (buf[0] == 0) snprintf(buf, n, "none");
  return buf;
}

int shmfd_check(int fd, uint64_t bytes, int seals, const char *what, const char **field, char *err,
                size_t errlen) {
  struct stat st;
  *field = "num_fds";
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return err_set(err, errlen, FGB_EINVAL, "num_fds: %s is not a memfd", what);
  seals |= F_SEAL_SHRINK;
  int have = fcntl(fd, F_GET_SEALS);
  if (have < 0 || (have & seals) != seals) {
    char want[64], got[64];
    seal_names(seals, want, sizeof(want));
    if (have < 0)
      return err_set(err, errlen, FGB_EINVAL,
                     "num_fds: %s must be a memfd sealed with %s; it cannot carry seals (%s: a "
                     "regular file or a memfd created without MFD_ALLOW_SEALING)",
                     what, want, strerror(errno));
    return err_set(err, errlen, FGB_EINVAL,
                   "num_fds: %s must be a memfd sealed with %s (seals found: %s): a client could "
                   "shrink it under the daemon's mapping",
                   what, want, seal_names(have, got, sizeof(got)));
  }
  if ((uint64_t)st.st_size < bytes) {
    *field = "bytes";
    return err_set(err, errlen, FGB_EINVAL, "bytes: %llu bytes declared, %s has %llu",
                   (unsigned long long)bytes, what, (unsigned long long)st.st_size);
  }
  return 0;
}
