// Tunables read from the environment.  Every variable is documented in
// docs/ENV.md; defaults live here and nowhere else.
#pragma once
#include <cstddef>
#include <string>

namespace tern {

std::string envString(const char* name, const std::string& dflt);
long long envInt(const char* name, long long dflt);
bool envSet(const char* name);

struct Config {
  double timeoutSec;       // TERN_TIMEOUT: longest wait without progress
  size_t fifoBytes;        // TERN_BUFFSIZE: bytes per direction per connection
  size_t chunkBytes;       // TERN_CHUNKSIZE: ring pipeline chunk
  size_t smallBytes;       // TERN_SMALL_THRESHOLD: allreduce below uses recursive doubling
  std::string transport;   // TERN_TRANSPORT: auto|shm|tcp
  std::string ifname;      // TERN_SOCKET_IFNAME
};

// Reads the environment once per call (comms made later see new values).
Config readConfig();

}  // namespace tern
