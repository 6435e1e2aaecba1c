/* boot/config.h — fgbuffd's settings at start-up: the command line (and --config's file) and the
 * environment's defaults parsed into srv_config, the runtime directory. The struct and the
 * live-settable keys (ConfigGet/ConfigSet) are conf/settings.h's. */
#ifndef FGB_BOOT_CONFIG_H
#define FGB_BOOT_CONFIG_H

#include <stddef.h>

#include "fgbuff/client.h"
#include "net.h"      /* net_access */
#include "settings.h" /* srv_config, the live keys (conf/) */

/* 1 in a build with the GPU data plane (FGBUFF_HAVE_CUDA; defined in main.c). */
extern const int boot_has_cuda;

/* Parse argv into cfg (defaults first). Returns 0, or 2 with a message in err for a bad command
 * line (the caller prints it and exits 2), or 1 when --help was printed. */
int config_parse(srv_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Resolve the runtime directory (flag, $FGBUFF_RUNTIME_DIR, $XDG_RUNTIME_DIR/fgbuff,
 * /tmp/fgbuff-<uid>) into cfg->runtime_dir, create it if missing and set its mode (and group) from
 * config_access: 0700 unless other uids or a group may connect. */
fgb_status config_runtime_dir(srv_config *cfg, char *err, size_t errlen);

/* The runtime directory's and socket's access, set by config_runtime_dir. */
net_access config_access(const srv_config *cfg);

#endif
