/* The job token of a job whose processes start apart (see host.h).
 *
 * On one node the host makes a random token and hands it to its workers in
 * their environment. Processes started apart (the hosts of several nodes,
 * the tasks srun or mpirun starts) have no such channel, and anything they
 * could all compute from what they are given (master address and port,
 * SLURM_JOB_ID, Open MPI's job id) is public: squeue shows job ids to every
 * user, and the address and port are on the command line. A token derived
 * from them lets anyone who can reach the store join the job or stop it
 * with a forged message. So such a job needs a secret: DDPLUA_JOB_TOKEN (the
 * environment of a user's processes is private to that user; srun and
 * mpirun pass it to every task) or --token_file (a file only the user can
 * read, e.g. in a job directory every node mounts). Without one the host
 * refuses to start, unless --insecure says to go ahead with a derived
 * token; docs/multi_node_security.md has the reasons and the recipes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "host/host.h"
#include "io/regular_file.h"

uint64_t dp_fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static const char TOKEN_CHARS[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.";

/* The token for a secret: itself when it is short and of plain characters
 * (what the store and the shared-memory names accept), else a digest. */
static void token_of(const char *secret, char *out, size_t n) {
  size_t len = strlen(secret);
  if (len < 64 && strspn(secret, TOKEN_CHARS) == len) {
    snprintf(out, n, "%s", secret);
    return;
  }
  snprintf(out, n, "%016llx%016llx", (unsigned long long)dp_fnv1a(secret, 14695981039346656037ull),
           (unsigned long long)dp_fnv1a(secret, 0x9e3779b97f4a7c15ull));
}

/* The first line of path, which must be a regular file that no other user
 * can read or write. */
static int read_token_file(const char *path, char *out, size_t n) {
  FILE *f = dp_fopen_regular(path, NULL);
  if (!f) {
    char why[256];
    snprintf(why, sizeof why, "%s", dp_errmsg());
    return dp_error("--token_file %s: %s", path, why);
  }
  struct stat st;
  int rc = 0;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
    rc = dp_error("--token_file %s: other users can read or write it (mode %03o); make it private: chmod 600 %s", path,
                  (unsigned)(st.st_mode & 0777), path);
  else if (!fgets(out, (int)n, f))
    rc = dp_error("--token_file %s: the file is empty (expected the token on its first line)", path);
  fclose(f);
  if (rc) return rc;
  out[strcspn(out, "\r\n")] = 0;
  size_t len = strlen(out);
  while (len && (out[len - 1] == ' ' || out[len - 1] == '\t')) out[--len] = 0;
  return 0;
}

int dp_job_token(const dp_host_opts *o, const char *who, const char *public_seed, bool warn, char *out, size_t n) {
  char secret[512] = "";
  const char *source = NULL;
  if (o->token_file) {
    if (read_token_file(o->token_file, secret, sizeof secret)) return -1;
    source = "--token_file";
  } else if (getenv("DDPLUA_JOB_TOKEN") && *getenv("DDPLUA_JOB_TOKEN")) {
    snprintf(secret, sizeof secret, "%s", getenv("DDPLUA_JOB_TOKEN"));
    source = "DDPLUA_JOB_TOKEN";
  }
  if (source) {
    if (strlen(secret) < DP_TOKEN_MIN_CHARS)
      return dp_error("%s holds %zu characters; a job token needs at least %d (e.g. 32 random hex digits: "
                      "openssl rand -hex 16)",
                      source, strlen(secret), DP_TOKEN_MIN_CHARS);
    token_of(secret, out, n);
    return 0;
  }
  if (!o->insecure)
    return dp_error(
        "%s needs a secret job token that only its processes know, or anyone who can reach the store could join the "
        "job or stop it: give every process the same DDPLUA_JOB_TOKEN (export DDPLUA_JOB_TOKEN=$(openssl rand -hex "
        "16); under Slurm, in the batch script before srun, which passes it to every task) or --token_file FILE (a "
        "file only you can read, on every node); --insecure runs without one",
        who);
  if (warn)
    fprintf(stderr,
            "ddplua: warning: --insecure: %s runs with a job token derived from public values (%s); anyone who can "
            "reach the store can join the job or stop it\n",
            who, public_seed);
  token_of(public_seed, out, n);
  return 0;
}
