/* daemon/boot/config_file.h — fgbuffd's configuration file (--config FILE), merged in front of the
 * command line so the flags override it; see config_file.c for the format. */
#ifndef FGB_BOOT_CONFIG_FILE_H
#define FGB_BOOT_CONFIG_FILE_H

#include <getopt.h>
#include <stddef.h>

/* Build the argv getopt sees: argv[0], the file's entries as --key=value (checked against opts:
 * an unknown key is an error naming the file, line and key), then the command line without
 * --config. Returns 0, or -1 with err set. */
int config_file_merge(int argc, char **argv, const struct option *opts, int *out_argc,
                      char ***out_argv, char *err, size_t errlen);

/* "config FILE line N: " when merged argv[index] came from the file, else "". */
void config_file_where(int index, char *out, size_t outlen);

#endif
