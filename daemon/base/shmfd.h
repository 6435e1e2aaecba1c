/* daemon/base/shmfd.h — the check of a client's shared-memory fd before the daemon maps it: a
 * file whose size can shrink under a mapping turns the next access into SIGBUS, which kills the
 * daemon and, under mpirun, every job of every user in the world. */
#ifndef FGB_BASE_SHMFD_H
#define FGB_BASE_SHMFD_H

#include <stddef.h>
#include <stdint.h>

/* 0 when fd is a regular file (a memfd) of at least `bytes` bytes carrying every seal in
 * `seals` (F_SEAL_* bits; F_SEAL_SHRINK at least, or the size could still drop under the
 * mapping). Otherwise FGB_EINVAL, with *field set to the protocol field to name ("num_fds" for
 * the fd itself, "bytes" for the size) and err "<field>: <what> ..." naming what was found.
 * `what` names the fd in the message ("the arena's fd"). */
int shmfd_check(int fd, uint64_t bytes, int seals, const char *what, const char **field, char *err,
                size_t errlen);

#endif
