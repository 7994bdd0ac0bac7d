/* The host's command line:
 *   ddplua [--nproc N|auto] [--nnodes N --node_rank R --master_addr A --master_port P]
 *          [--token_file FILE | --insecure]
 *          [--backend auto|nccl|cpu] [--config run.yaml] [--log_dir DIR] [--timeout S]
 *          script.lua|tool [key=value ...] [script args ...]
 * Options come before the script (`--opt value` or `--opt=value`); everything after the script belongs to
 * it. The --config file's `ddplua:` mapping supplies the options the command line did not give, and its
 * `script:` the script when the command line names none. */
#include <dirent.h>
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"
#include "io/yaml_lua.h"

enum {
  OPT_NPROC,
  OPT_NNODES,
  OPT_NODE_RANK,
  OPT_MASTER_ADDR,
  OPT_MASTER_PORT,
  OPT_BACKEND,
  OPT_TIMEOUT,
  OPT_LOG_DIR,
  OPT_CONFIG,
  OPT_TOKEN_FILE,
  OPT_INSECURE,
  N_OPTS
};

/* Options in the order --help lists them. From `config` on they are
 * command-line only (the security choices are not left to a run file);
 * `insecure` is a flag, without a value. */
static const struct {
  const char *name, *expects;
} opt_info[N_OPTS] = {
    [OPT_NPROC] = {"nproc", "a positive integer or 'auto'"},
    [OPT_NNODES] = {"nnodes", "a positive integer"},
    [OPT_NODE_RANK] = {"node_rank", "an integer from 0 to nnodes-1"},
    [OPT_MASTER_ADDR] = {"master_addr", "a host name or IPv4 address"},
    [OPT_MASTER_PORT] = {"master_port", "a port number from 1 to 65535"},
    [OPT_BACKEND] = {"backend", "one of auto, nccl, cpu"},
    [OPT_TIMEOUT] = {"timeout", "a positive number of seconds"},
    [OPT_LOG_DIR] = {"log_dir", "a directory name"},
    [OPT_CONFIG] = {"config", "a YAML file"},
    [OPT_TOKEN_FILE] = {"token_file", "a file holding the job's secret token"},
    [OPT_INSECURE] = {"insecure", "no value"},
};

static const char usage_text[] =
    "usage: ddplua [options] script.lua [key=value ...] [script args ...]\n"
    "       ddplua [options] --config run.yaml [key=value ...]   (run.yaml names the script)\n"
    "       ddplua TOOL [args ...]                               (lua/ddplua/tools/TOOL.lua, e.g. plot)\n"
    "\n"
    "Runs a Lua script in-process, or as N ranks of a data-parallel job, each with RANK, LOCAL_RANK,\n"
    "WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT set (as torchrun does).\n"
    "\n"
    "options:\n"
    "  --nproc N|auto      processes on this node (default 1: run in-process; auto: one per visible GPU,\n"
    "                      else one per core)\n"
    "  --nnodes N          nodes in the job (default 1); each node runs its own ddplua\n"
    "  --node_rank R       this node's index, 0..N-1 (node 0 serves the rendezvous store)\n"
    "  --master_addr A     node 0's address (default 127.0.0.1)\n"
    "  --master_port P     the store's port (default: a free one on one node, 29500 across nodes)\n"
    "  --backend B         auto|nccl|cpu for init_process_group (default auto)\n"
    "  --config FILE       YAML run file: its `ddplua:` section sets these options (the command line\n"
    "                      wins), `script:` names the script; passed to the script as DDPLUA_CONFIG\n"
    "  --log_dir DIR       also write each rank's output to DIR/rank_N.log\n"
    "  --timeout S         deadline in seconds for rendezvous and every collective (default 300)\n"
    "  --token_file FILE   the job's secret token (first line of FILE, which only you may read); a job\n"
    "                      across nodes, or of a scheduler's tasks, needs one (or DDPLUA_JOB_TOKEN)\n"
    "  --insecure          run such a job without a secret: anyone who reaches the store can join it\n"
    "  --help, --version\n"
    "\n"
    "Each rank's output is printed line by line as \"[rank N] ...\". When a rank fails, the others are\n"
    "stopped and ddplua exits with that rank's exit code (128+signal if it was killed).\n"
    "Under Slurm (srun) or Open MPI (mpirun) each process is already one rank and runs in-process.\n";

static int usage_error(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "ddplua: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n(run 'ddplua --help' for usage)\n");
  return 2;
}

int dp_host_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int dp_host_visible_gpus(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) {
    /* CUDA reads the list up to the first invalid entry ("-1" hides all) */
    int n = 0;
    const char *p = cvd;
    while (*p && *p != '-') {
      size_t len = strcspn(p, ",");
      if (len == 0) break;
      n++;
      p += len;
      if (*p == ',') p++;
    }
    return n;
  }
  int n = 0;
  DIR *d = opendir("/dev");
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));) {
    const char *s = e->d_name;
    if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
    if (strspn(s + 6, "0123456789") == strlen(s + 6)) n++;
  }
  closedir(d);
  return n;
}

void dp_host_format_seconds(double s, char *out, size_t n) {
  if (s == floor(s) && s < 1e15) snprintf(out, n, "%.0f", s);
  else snprintf(out, n, "%g", s);
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static void set_str(char **slot, const char *v) {
  free(*slot);
  *slot = dp_xstrdup(v);
}

/* Validates and stores one option value. -1 + dp_error("expected ..."). */
static int set_option(dp_host_opts *o, int id, const char *v) {
  long n = 0;
  switch (id) {
  case OPT_NPROC:
    if (strcmp(v, "auto") == 0) {
      int g = dp_host_visible_gpus();
      o->nproc = g > 0 ? g : dp_host_cores();
      break;
    }
    if (parse_int(v, 1, 65536, &n)) goto bad;
    o->nproc = (int)n;
    break;
  case OPT_NNODES:
    if (parse_int(v, 1, 65536, &n)) goto bad;
    o->nnodes = (int)n;
    break;
  case OPT_NODE_RANK:
    if (parse_int(v, 0, 65535, &n)) goto bad;
    o->node_rank = (int)n;
    break;
  case OPT_MASTER_ADDR:
    if (!*v || strlen(v) > 253 || strpbrk(v, " \t\n/")) goto bad;
    set_str(&o->master_addr, v);
    break;
  case OPT_MASTER_PORT:
    if (parse_int(v, 1, 65535, &n)) goto bad;
    o->master_port = (int)n;
    break;
  case OPT_BACKEND:
    if (strcmp(v, "auto") && strcmp(v, "nccl") && strcmp(v, "cpu")) goto bad;
    set_str(&o->backend, v);
    break;
  case OPT_TIMEOUT: {
    char *end;
    double t = strtod(v, &end);
    if (end == v || *end || !(t > 0) || !isfinite(t) || t > 1e9) goto bad;
    o->timeout_s = t;
    break;
  }
  case OPT_LOG_DIR:
    if (!*v) goto bad;
    set_str(&o->log_dir, v);
    break;
  case OPT_TOKEN_FILE:
    if (!*v) goto bad;
    set_str(&o->token_file, v);
    break;
  case OPT_INSECURE: o->insecure = true; break;
  case OPT_CONFIG: {
    char abs[PATH_MAX];
    struct stat st;
    if (stat(v, &st) != 0) return dp_error("cannot open '%s': %s", v, strerror(errno));
    if (!S_ISREG(st.st_mode) || !realpath(v, abs)) return dp_error("'%s' is not a readable file", v);
    set_str(&o->config, abs);
    break;
  }
  default: DP_ASSERT(0);
  }
  return 0;
bad:
  return dp_error("expected %s, got '%s'", opt_info[id].expects, v);
}

static int find_option(const char *name, size_t len) {
  for (int i = 0; i < N_OPTS; i++)
    if (strlen(opt_info[i].name) == len && strncmp(opt_info[i].name, name, len) == 0) return i;
  return -1;
}

static void list_options(char *buf, size_t n, bool yaml) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < N_OPTS && k < n; i++) {
    if (yaml && i >= OPT_CONFIG) break;
    k += (size_t)snprintf(buf + k, n - k, "%s%s%s", k ? ", " : "", yaml ? "" : "--", opt_info[i].name);
  }
}

/* The `ddplua:` section and `script:` of the config file. `given` marks the
 * options the command line set (they win). *script gets the config's
 * script resolved against the cwd, then the YAML file's directory. */
static int load_config(dp_host_opts *o, const char *shown_path, const bool *given, char **script) {
  lua_State *L = luaL_newstate();
  if (!L) return dp_error("out of memory");
  int rc = -1;
  if (dp_yaml_push_file(L, shown_path) != 0) goto out; /* "<file>:<line>:<column>: <problem>" */
  if (lua_isnil(L, -1)) {                              /* empty file */
    rc = 0;
    goto out;
  }
  if (!lua_istable(L, -1)) {
    dp_error("%s: expected a mapping at the top level, got a %s", shown_path, luaL_typename(L, -1));
    goto out;
  }
  int top = lua_gettop(L);
  lua_getfield(L, top, "ddplua");
  if (!lua_isnil(L, -1)) {
    char valid[256];
    list_options(valid, sizeof valid, true);
    if (!lua_istable(L, -1)) {
      dp_error("%s: 'ddplua' must be a mapping of launcher options (%s), got a %s", shown_path, valid,
               luaL_typename(L, -1));
      goto out;
    }
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      int id = key ? find_option(key, strlen(key)) : -1;
      if (id < 0 || id >= OPT_CONFIG) {
        dp_error("%s: unknown key 'ddplua.%s' (valid keys: %s)", shown_path, key ? key : luaL_tolstring(L, -2, NULL),
                 valid);
        goto out;
      }
      int t = lua_type(L, -1);
      if (t != LUA_TSTRING && t != LUA_TNUMBER) {
        dp_error("%s: ddplua.%s: expected %s, got a %s", shown_path, key, opt_info[id].expects, lua_typename(L, t));
        goto out;
      }
      const char *text = luaL_tolstring(L, -1, NULL); /* 2.0 stays "2.0": not an integer */
      int bad = given[id] ? 0 : set_option(o, id, text);
      lua_pop(L, 1);
      if (bad) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dp_errmsg());
        dp_error("%s: ddplua.%s: %s", shown_path, key, msg);
        goto out;
      }
      if (id == OPT_NPROC) o->nproc_given = true;
      if (id == OPT_NNODES) o->nnodes_given = true;
    }
  }
  lua_settop(L, top);
  lua_getfield(L, top, "script");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING) {
      dp_error("%s: 'script' must be a file name, got a %s", shown_path, luaL_typename(L, -1));
      goto out;
    }
    const char *s = lua_tostring(L, -1);
    char alt[PATH_MAX];
    if (s[0] == '/' || access(s, F_OK) == 0) {
      snprintf(alt, sizeof alt, "%s", s);
    } else {
      const char *slash = strrchr(o->config, '/'); /* o->config is absolute */
      snprintf(alt, sizeof alt, "%.*s/%s", (int)(slash - o->config), o->config, s);
    }
    char abs[PATH_MAX];
    if (access(alt, R_OK) != 0 || !realpath(alt, abs)) {
      dp_error("%s: script '%s' not found (looked in the current directory and next to the YAML file)", shown_path, s);
      goto out;
    }
    *script = dp_xstrdup(abs);
  }
  rc = 0;
out:
  lua_close(L);
  return rc;
}

/* `name` is a tool when it looks like one ([a-z][a-z_]*, so no .lua) and is
 * not a file; its script is <lua dir>/ddplua/tools/<name>.lua. Returns 1
 * and sets *path for a tool, 0 for a script, 2 after an error message. */
static int resolve_tool(const char *name, char **path) {
  if (!(name[0] >= 'a' && name[0] <= 'z') || strspn(name, "abcdefghijklmnopqrstuvwxyz_") != strlen(name)) return 0;
  struct stat st;
  if (stat(name, &st) == 0) return 0;
  char dir[PATH_MAX], file[PATH_MAX + 300];
  dp_host_lua_dir(dir, sizeof dir);
  snprintf(file, sizeof file, "%s/ddplua/tools/%s.lua", dir, name);
  if (access(file, R_OK) == 0) {
    *path = dp_xstrdup(file);
    return 1;
  }
  char list[2048] = "";
  size_t k = 0;
  snprintf(file, sizeof file, "%s/ddplua/tools", dir);
  DIR *d = opendir(file);
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len > 4 && strcmp(e->d_name + len - 4, ".lua") == 0 && k + len < sizeof list)
      k += (size_t)snprintf(list + k, sizeof list - k, "%s%.*s", k ? ", " : "", (int)len - 4, e->d_name);
  }
  if (d) closedir(d);
  fprintf(stderr, "ddplua: '%s' is neither a script file nor a tool; available tools: %s\n", name, k ? list : "(none)");
  return 2;
}

void dp_host_opts_free(dp_host_opts *o) {
  free(o->master_addr);
  free(o->backend);
  free(o->config);
  free(o->log_dir);
  free(o->token_file);
  free(o->script);
  memset(o, 0, sizeof *o);
}

int dp_host_parse(int argc, char **argv, dp_host_opts *o, bool *done) {
  memset(o, 0, sizeof *o);
  o->nproc = 1;
  o->nnodes = 1;
  o->timeout_s = 300;
  o->backend = dp_xstrdup("auto");
  *done = true;
  bool given[N_OPTS] = {false};
  const char *config_shown = NULL;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-') break;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (strcmp(a, "--version") == 0) {
      printf("ddplua %s (%s)\n", DDPLUA_VERSION, LUA_RELEASE);
      return 0;
    }
    const char *name = a + 2, *eq = strchr(a, '=');
    int id = a[1] == '-' ? find_option(name, eq ? (size_t)(eq - name) : strlen(name)) : -1;
    if (id < 0) {
      char valid[256];
      list_options(valid, sizeof valid, false);
      return usage_error("unknown option '%s' (valid options: %s, --help, --version)", a, valid);
    }
    const char *v = eq ? eq + 1 : NULL;
    if (id == OPT_INSECURE) {
      if (v) return usage_error("--insecure takes no value (got '%s')%s", v, "");
      v = "";
    } else if (!v) {
      if (i + 1 >= argc) {
        fprintf(stderr, "ddplua: --%s expects a value (%s)\n", opt_info[id].name, opt_info[id].expects);
        return 2;
      }
      v = argv[++i];
    }
    if (set_option(o, id, v) != 0) {
      fprintf(stderr, "ddplua: --%s: %s\n", opt_info[id].name, dp_errmsg());
      return 2;
    }
    given[id] = true;
    if (id == OPT_CONFIG) config_shown = v;
  }
  o->nproc_given = given[OPT_NPROC];
  o->nnodes_given = given[OPT_NNODES];
  char *config_script = NULL;
  if (o->config && load_config(o, config_shown, given, &config_script) != 0) {
    fprintf(stderr, "ddplua: %s\n", dp_errmsg());
    return 2;
  }
  /* The first positional argument is the script, unless the config names
   * the script and the argument is a key=value override for it. */
  if (i < argc && !(config_script && strchr(argv[i], '='))) {
    free(config_script);
    int t = resolve_tool(argv[i], &o->script);
    if (t == 2) return 2;
    if (t == 0) o->script = dp_xstrdup(argv[i]);
    o->n_pre = i;
    o->args_pos = i + 1;
  } else if (config_script) {
    o->script = config_script;
    o->n_pre = i;
    o->args_pos = i;
  } else {
    fputs(usage_text, stderr);
    fprintf(stderr, "\nddplua: no script given%s\n", o->config ? " (and the config file has no 'script:')" : "");
    return 2;
  }
  if (o->node_rank >= o->nnodes) {
    fprintf(stderr, "ddplua: --node_rank %d is out of range for --nnodes %d (expected 0..%d)\n", o->node_rank,
            o->nnodes, o->nnodes - 1);
    return 2;
  }
  *done = false;
  return 0;
}
