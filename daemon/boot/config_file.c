/* daemon/boot/config_file.c — `fgbuffd --config FILE`: a file of `key = value` lines for every flag
 * (keys are the long flag names, `-` or `_` alike; `#` starts a comment). The file's entries go in
 * front of the command line's, so getopt applies the flags after them: flags override the file
 * (repeatable ones, --allow-uid, add up). Unknown keys and bad values are errors naming the file,
 * the line and the key. */
#include "config_file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CF_MAX_ENTRIES 64

/* The merged argv lives for the process (cfg copies what it needs; getopt keeps pointers). */
static char *merged[CF_MAX_ENTRIES + 256];
static int merged_line[CF_MAX_ENTRIES + 256]; /* file line of merged[i], 0 = command line */
static char cf_path[512];

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

int config_file_merge(int argc, char **argv, const struct option *opts, int *out_argc,
                      char ***out_argv, char *err, size_t errlen) {
  const char *path = NULL;
  int n = 0;
  merged[n++] = argv[0];
  /* Find --config (not passed on to getopt). */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      path = argv[i + 1];
      break;
    }
    if (strncmp(argv[i], "--config=", 9) == 0) {
      path = argv[i] + 9;
      break;
    }
  }
  if (argc > (int)(sizeof(merged) / sizeof(merged[0])) - CF_MAX_ENTRIES - 1) {
    snprintf(err, errlen, "too many arguments");
    return -1;
  }
  if (path) {
    snprintf(cf_path, sizeof(cf_path), "%s", path);
    FILE *f = fopen(path, "re");
    if (!f) {
      snprintf(err, errlen, "--config %s: %s", path, strerror(errno));
      return -1;
    }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof(line), f)) {
      lineno++;
      if (!strchr(line, '\n') && !feof(f)) {
        snprintf(err, errlen, "config %s line %d: line too long", path, lineno);
        fclose(f);
        return -1;
      }
      char *hash = strchr(line, '#');
      if (hash) *hash = 0;
      char *s = trim(line);
      if (!*s) continue;
      char *eq = strchr(s, '=');
      if (!eq) {
        snprintf(err, errlen, "config %s line %d: want 'key = value', got '%.64s'", path, lineno,
                 s);
        fclose(f);
        return -1;
      }
      *eq = 0;
      char *key = trim(s), *val = trim(eq + 1);
      for (char *p = key; *p; p++)
        if (*p == '_') *p = '-';
      const struct option *o = opts;
      for (; o->name; o++)
        if (o->has_arg == required_argument && strcmp(o->name, key) == 0) break;
      if (!o->name || strcmp(key, "config") == 0) {
        char known[512];
        size_t off = 0;
        known[0] = 0;
        for (const struct option *k = opts; k->name; k++) {
          if (k->has_arg != required_argument) continue;
          int w = snprintf(known + off, sizeof(known) - off, "%s%s", off ? ", " : "", k->name);
          if (w > 0 && (size_t)w < sizeof(known) - off) off += (size_t)w;
        }
        snprintf(err, errlen, "config %s line %d: unknown key '%.64s' (known: %s)", path, lineno,
                 key, known);
        fclose(f);
        return -1;
      }
      if (n >= CF_MAX_ENTRIES) {
        snprintf(err, errlen, "config %s: more than %d entries", path, CF_MAX_ENTRIES - 1);
        fclose(f);
        return -1;
      }
      size_t len = strlen(key) + strlen(val) + 4;
      char *arg = malloc(len);
      if (!arg) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return -1;
      }
      snprintf(arg, len, "--%s=%s", key, val);
      merged_line[n] = lineno;
      merged[n++] = arg;
    }
    fclose(f);
  }
  for (int i = 1; i < argc; i++) {
    if (path && (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0)) {
      if (argv[i][8] == 0) i++; /* "--config FILE": skip FILE too */
      continue;
    }
    merged_line[n] = 0;
    merged[n++] = argv[i];
  }
  merged[n] = NULL;
  *out_argc = n;
  *out_argv = merged;
  return 0;
}

void config_file_where(int index, char *out, size_t outlen) {
  if (index > 0 && index < (int)(sizeof(merged_line) / sizeof(merged_line[0])) &&
      merged_line[index])
    snprintf(out, outlen, "config %s line %d: ", cf_path, merged_line[index]);
  else if (outlen)
    out[0] = 0;
}
