/* Command line of the host. (Multi-process launching lands with the
 * process-group work; this runs the script in-process.) */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "host/host.h"

static void usage(FILE *f) {
  fprintf(f, "usage: ddplua [options] script.lua [args...]\n");
}

int dp_host_main(int argc, char **argv) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    fprintf(stderr, "ddplua: unknown option %s\n", argv[i]);
    usage(stderr);
    return 2;
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  lua_State *L = dp_host_new_state();
  if (!L) {
    fprintf(stderr, "ddplua: cannot create a Lua state\n");
    return 1;
  }
  int rc = dp_host_run_script(L, argv[i], argc - i - 1, argv + i + 1, argv[0]);
  lua_close(L);
  return rc;
}
