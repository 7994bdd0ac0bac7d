/* Scheduler environments: under Slurm's srun or Open MPI's mpirun every
 * process the scheduler started is already one rank, so the host maps the
 * scheduler's variables to the torchrun ones and runs the script in-process.
 *
 * Slurm (a job step: SLURM_PROCID plus SLURM_STEP_ID; the batch script
 * itself also has SLURM_PROCID=0 but no step id, and is not a rank):
 *   RANK = SLURM_PROCID, WORLD_SIZE = SLURM_NTASKS, LOCAL_RANK = SLURM_LOCALID, NODE_RANK = SLURM_NODEID,
 *   LOCAL_WORLD_SIZE = this node's entry of SLURM_STEP_TASKS_PER_NODE ("2(x3),1" form),
 *   MASTER_ADDR = $MASTER_ADDR or SLURM_LAUNCH_NODE_IPADDR, MASTER_PORT = $MASTER_PORT or one derived from
 *   SLURM_JOB_ID and SLURM_STEP_ID (10000..29999, the same on every task).
 * Open MPI: RANK = OMPI_COMM_WORLD_RANK, WORLD_SIZE = OMPI_COMM_WORLD_SIZE, LOCAL_RANK / LOCAL_WORLD_SIZE =
 *   OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE; NODE_RANK = RANK / LOCAL_WORLD_SIZE (mpirun's default mapping
 *   fills node after node, with the same count on each); MASTER_ADDR / MASTER_PORT from the environment
 *   (127.0.0.1 on one node; the port may be derived from the MPI job id).
 * Rank 0 serves the rendezvous store on MASTER_ADDR:MASTER_PORT. The job
 * token comes from DDPLUA_JOB_TOKEN or --token_file (token.c): nothing the
 * scheduler gives every task alike is secret. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "host/host.h"

/* Reads an integer variable in [lo, hi]; -1 + dp_error naming it. */
static int env_int(const char *who, const char *name, long lo, long hi, int *out) {
  const char *v = getenv(name);
  if (!v) return dp_error("%s: %s is not set", who, name);
  char *end;
  long x = strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi)
    return dp_error("%s: %s='%s' is not an integer in %ld..%ld", who, name, v, lo, hi);
  *out = (int)x;
  return 0;
}

static const char *first_env(const char *a, const char *b, const char *c) {
  const char *v = getenv(a);
  if (!v && b) v = getenv(b);
  if (!v && c) v = getenv(c);
  return v;
}

/* The count for node `node` in Slurm's "2(x3),1" notation, or -1. */
static int tasks_on_node(const char *spec, int node) {
  const char *p = spec;
  int at = 0;
  while (*p) {
    char *end;
    long count = strtol(p, &end, 10), reps = 1;
    if (end == p || count < 1) return -1;
    p = end;
    if (strncmp(p, "(x", 2) == 0) {
      reps = strtol(p + 2, &end, 10);
      if (end == p + 2 || *end != ')' || reps < 1) return -1;
      p = end + 1;
    }
    if (node < at + reps) return (int)count;
    at += (int)reps;
    if (*p == ',') p++;
    else if (*p) return -1;
  }
  return -1;
}

static int master_from_env(dp_placement *p, const char *fallback_addr, const char *port_seed) {
  const char *addr = getenv("MASTER_ADDR");
  if (!addr || !*addr) addr = fallback_addr;
  if (!addr)
    return dp_error("%s: MASTER_ADDR is not set; the ranks span %d nodes, so set it to rank 0's host name",
                    p->scheduler, p->nnodes);
  snprintf(p->master_addr, sizeof p->master_addr, "%s", addr);
  if (getenv("MASTER_PORT")) {
    if (env_int(p->scheduler, "MASTER_PORT", 1, 65535, &p->master_port)) return -1;
  } else if (port_seed) {
    p->master_port = 10000 + (int)(dp_fnv1a(port_seed, 14695981039346656037ull) % 20000);
  } else {
    return dp_error("%s: MASTER_PORT is not set and there is no job id to derive one from", p->scheduler);
  }
  snprintf(p->public_seed, sizeof p->public_seed, "%s job %s, %s:%d", p->scheduler, port_seed ? port_seed : "-",
           p->master_addr, p->master_port);
  return 0;
}

static int detect_slurm(dp_placement *p) {
  const char *who = p->scheduler = "Slurm";
  if (env_int(who, "SLURM_PROCID", 0, 1 << 24, &p->rank) || env_int(who, "SLURM_LOCALID", 0, 1 << 24, &p->local_rank) ||
      env_int(who, "SLURM_NODEID", 0, 1 << 24, &p->node_rank))
    return -1;
  const char *ntasks = getenv("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_STEP_NUM_TASKS";
  if (env_int(who, ntasks, 1, 1 << 24, &p->world_size)) return -1;
  const char *nn = getenv("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  if (getenv(nn)) {
    if (env_int(who, nn, 1, 1 << 24, &p->nnodes)) return -1;
  } else {
    p->nnodes = 1;
  }
  const char *tpn = first_env("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", NULL);
  if (tpn) {
    p->local_world_size = tasks_on_node(tpn, p->node_rank);
    if (p->local_world_size < 0)
      return dp_error("%s: cannot read node %d's task count from SLURM_STEP_TASKS_PER_NODE='%s'", who, p->node_rank,
                      tpn);
  } else if (p->nnodes == 1) {
    p->local_world_size = p->world_size;
  } else {
    return dp_error("%s: SLURM_STEP_TASKS_PER_NODE is not set; cannot tell how many ranks run on this node", who);
  }
  if (p->rank >= p->world_size)
    return dp_error("%s: SLURM_PROCID=%d is out of range for SLURM_NTASKS=%d", who, p->rank, p->world_size);
  if (p->local_rank >= p->local_world_size)
    return dp_error("%s: SLURM_LOCALID=%d is out of range for %d tasks on node %d", who, p->local_rank,
                    p->local_world_size, p->node_rank);
  if (p->node_rank >= p->nnodes)
    return dp_error("%s: SLURM_NODEID=%d is out of range for %d nodes", who, p->node_rank, p->nnodes);
  const char *job = getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : getenv("SLURM_JOBID");
  char seed[256];
  if (job) snprintf(seed, sizeof seed, "%s.%s", job, first_env("SLURM_STEP_ID", "SLURM_STEPID", NULL));
  const char *fallback = getenv("SLURM_LAUNCH_NODE_IPADDR");
  if (!fallback && p->nnodes == 1) fallback = "127.0.0.1";
  return master_from_env(p, fallback, job ? seed : NULL);
}

static int detect_ompi(dp_placement *p) {
  const char *who = p->scheduler = "Open MPI";
  if (env_int(who, "OMPI_COMM_WORLD_SIZE", 1, 1 << 24, &p->world_size) ||
      env_int(who, "OMPI_COMM_WORLD_RANK", 0, p->world_size - 1, &p->rank) ||
      env_int(who, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, p->world_size, &p->local_world_size) ||
      env_int(who, "OMPI_COMM_WORLD_LOCAL_RANK", 0, p->local_world_size - 1, &p->local_rank))
    return -1;
  p->nnodes = (p->world_size + p->local_world_size - 1) / p->local_world_size;
  p->node_rank = p->rank / p->local_world_size;
  const char *job = first_env("OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE");
  return master_from_env(p, p->nnodes == 1 ? "127.0.0.1" : NULL, job);
}

int dp_sched_detect(dp_placement *p) {
  memset(p, 0, sizeof *p);
  /* mpirun inside a Slurm allocation: the MPI ranks are the processes */
  if (getenv("OMPI_COMM_WORLD_RANK")) return detect_ompi(p) ? -1 : 1;
  if (getenv("SLURM_PROCID") && (getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID"))) return detect_slurm(p) ? -1 : 1;
  return 0;
}
