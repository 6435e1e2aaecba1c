/* tests/client/peerconnect.c — fgb_connect to argv[1] and report: prints "status <code>" and the
 * client's message, exits 0 when connected (used by test-daemon-uid.sh against fake daemons);
 * "-" connects to the default socket (FGBUFF_RUNTIME_DIR ...). */
#include <stdio.h>
#include <string.h>

#include "fgbuff/client.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: peerconnect SOCKET\n");
    return 2;
  }
  fgb_client *c;
  if (fgb_client_new(&c) != FGB_OK) return 2;
  fgb_status s = fgb_connect(c, strcmp(argv[1], "-") == 0 ? NULL : argv[1]); /* -: default */
  printf("status %d\n%s\n", s, s ? fgb_client_error(c) : "connected");
  fgb_client_free(c);
  return s == FGB_OK ? 0 : 1;
}
