// Resolving rank, size, root address and job secret from a launcher's
// environment (ternrun, mpirun / MPI Operator, PMI, Slurm, torchrun).
#pragma once
#include <string>

#include "comm/bootstrap.h"

namespace tern {

struct EnvJob {
  int rank = -1, nranks = -1;
  IdContents id;         // root address and secret
  std::string source;    // which launcher's variables were used
};

ternResult_t jobFromEnv(EnvJob* job);

}  // namespace tern
