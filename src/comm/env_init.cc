// First match wins: TERN_RANK/TERN_NRANKS (ternrun), OMPI_COMM_WORLD_* (mpirun,
// MPI Operator), PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS, RANK/WORLD_SIZE
// (torchrun).  The root (rank 0's bootstrap listener) is TERN_ROOT, else
// MASTER_ADDR with port MASTER_PORT+1 (torch's own store holds MASTER_PORT),
// else the first host of the MPI hostfile, else loopback when every rank is
// local.  The secret is TERN_SECRET (32 hex digits, set by ternrun); without
// it one is derived from the job's identity, which keeps strangers from
// other jobs out but is not a real secret: the log says so.
#include "comm/env_init.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

namespace tern {

namespace {

bool pairFrom(const char* rankVar, const char* sizeVar, EnvJob* job) {
  if (!envSet(rankVar) || !envSet(sizeVar)) return false;
  job->rank = static_cast<int>(envInt(rankVar, -1));
  job->nranks = static_cast<int>(envInt(sizeVar, -1));
  job->source = std::string(rankVar) + "/" + sizeVar;
  return true;
}

std::string firstHostOfHostfile() {
  for (const char* var : {"TERN_HOSTFILE", "OMPI_MCA_orte_default_hostfile"}) {
    std::ifstream f(envString(var, ""));
    std::string line;
    while (f && std::getline(f, line)) {
      std::istringstream ss(line);
      std::string host;
      if (ss >> host && host[0] != '#') return host;
    }
  }
  return "";
}

ternResult_t rootAddress(const EnvJob& job, std::string* hostPort) {
  if (envSet("TERN_ROOT")) {
    *hostPort = envString("TERN_ROOT", "");
    return ternSuccess;
  }
  long long port = envInt("TERN_ROOT_PORT", -1);
  if (envSet("MASTER_ADDR")) {
    if (port < 0) port = envInt("MASTER_PORT", 29500) + 1;
    *hostPort = envString("MASTER_ADDR", "") + ":" + std::to_string(port);
    return ternSuccess;
  }
  std::string jobId = envString("OMPI_MCA_ess_base_jobid", envString("SLURM_JOB_ID", "0"));
  if (port < 0) port = 20000 + static_cast<long long>(std::hash<std::string>()(jobId) % 20000);
  std::string host = firstHostOfHostfile();
  bool allLocal = envInt("OMPI_COMM_WORLD_LOCAL_SIZE", -1) == job.nranks ||
                  envInt("SLURM_NNODES", -1) == 1;
  if (host.empty() && allLocal) host = "127.0.0.1";
  if (host.empty())
    return setError(ternInvalidUsage,
                    "cannot tell where rank 0 runs: set TERN_ROOT=host:port (or MASTER_ADDR), "
                    "or pass a hostfile via TERN_HOSTFILE");
  *hostPort = host + ":" + std::to_string(port);
  return ternSuccess;
}

ternResult_t secretFromEnv(const std::string& root, Secret* s) {
  std::string hex = envString("TERN_SECRET", "");
  if (!hex.empty()) {
    if (hex.size() != 32)
      return setError(ternInvalidArgument, "TERN_SECRET must be 32 hex digits");
    for (int i = 0; i < 16; ++i) {
      unsigned v;
      if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1)
        return setError(ternInvalidArgument, "TERN_SECRET must be 32 hex digits");
      s->key[i] = static_cast<uint8_t>(v);
    }
    return ternSuccess;
  }
  std::string ident = root;
  for (const char* v : {"OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                        "PMI_JOBID"})
    ident += "|" + envString(v, "");
  Secret zero{};
  uint64_t a = sipHash24(zero, ident.data(), ident.size());
  ident += "#2";
  uint64_t b = sipHash24(zero, ident.data(), ident.size());
  memcpy(s->key, &a, 8);
  memcpy(s->key + 8, &b, 8);
  TERN_LOG(Info, "TERN_SECRET not set: job secret derived from the job's identity (%s)",
           root.c_str());
  return ternSuccess;
}

}  // namespace

ternResult_t jobFromEnv(EnvJob* job) {
  if (!pairFrom("TERN_RANK", "TERN_NRANKS", job) &&
      !pairFrom("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", job) &&
      !pairFrom("PMI_RANK", "PMI_SIZE", job) && !pairFrom("SLURM_PROCID", "SLURM_NTASKS", job) &&
      !pairFrom("RANK", "WORLD_SIZE", job))
    return setError(ternInvalidUsage,
                    "no launcher environment found: set TERN_RANK/TERN_NRANKS/TERN_ROOT (or run "
                    "under ternrun, mpirun, srun or torchrun)");
  if (job->nranks < 1 || job->rank < 0 || job->rank >= job->nranks)
    return setError(ternInvalidArgument, "launcher environment gives rank " +
                                             std::to_string(job->rank) + " of " +
                                             std::to_string(job->nranks) + " (" + job->source +
                                             ")");
  std::string root;
  TERN_CHECK(rootAddress(*job, &root));
  TERN_CHECK(parseHostPort(root, &job->id.root));
  TERN_CHECK(secretFromEnv(root, &job->id.secret));
  TERN_LOG(Info, "rank %d of %d from %s, root %s", job->rank, job->nranks, job->source.c_str(),
           root.c_str());
  return ternSuccess;
}

}  // namespace tern
