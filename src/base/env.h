// Tunables read from the environment.  Every variable is documented in
// docs/ENV.md; defaults live here and nowhere else.
#pragma once
#include <cstddef>
#include <string>

#include "tern/tern.h"

namespace tern {

std::string envString(const char* name, const std::string& dflt);
// Unset or empty: dflt.  Malformed: dflt, and the first such variable is
// described in *malformed (when given) for the caller to refuse.
long long envInt(const char* name, long long dflt, std::string* malformed = nullptr);
double envDouble(const char* name, double dflt, std::string* malformed = nullptr);
bool envSet(const char* name);

struct Config {
  double timeoutSec;       // TERN_TIMEOUT: longest wait without progress
  double handshakeSec;     // TERN_HANDSHAKE_TIMEOUT: an accepted connection's time to authenticate
  double priorityHoldSec;  // TERN_PRIORITY_HOLD_US: less urgent levels wait this long after a more urgent one moved
  size_t fifoBytes;        // TERN_BUFFSIZE: bytes per direction per connection
  size_t fifoGranule;      // where an empty fifo restarts: divides fifoBytes (transport/fifo.h)
  size_t fifoWindow;       // TERN_FIFO_WINDOW: bytes through a fifo before an empty one restarts
  size_t chunkBytes;       // TERN_CHUNKSIZE: ring pipeline chunk
  size_t smallBytes;       // TERN_SMALL_THRESHOLD: allreduce below uses recursive doubling
  size_t shmDirectBytes;   // TERN_SHM_DIRECT: single-copy shm transfers from this size (0: off)
  size_t shmIpcBytes;     // TERN_SHM_IPC: device buffers over CUDA IPC from this size (0: off)
  size_t llBytes;          // TERN_LL_BYTES: shm operations up to this size take the LL lines (0: off)
  size_t bulkQueued;       // TERN_BULK_QUEUED: tcp bytes in the kernel a less urgent level may keep (0: no bound)
  size_t tcpUnstaged;      // TERN_TCP_UNSTAGED: plain tcp transfers from this size skip the fifos (0: never)
  bool smallPath;          // TERN_SMALL_PATH: small blocking collectives on an idle engine run on the caller's thread
  std::string transport;   // TERN_TRANSPORT: auto|shm|tcp|ucx
  std::string net;         // TERN_NET: auto|ucx|tcp, what auto uses across hosts
  std::string algo;        // TERN_ALGO: auto|ring|rd|twolevel, the allreduce's algorithm (comm/config.cc checks it)
  std::string modelFile;   // TERN_MODEL_FILE: the cost model auto asks (empty: auto's rule)
  std::string ifname;      // TERN_SOCKET_IFNAME
  std::string topoXml;     // TERN_TOPO_XML: decide from this hwloc XML, not the host
  std::string topoDump;    // TERN_TOPO_DUMP: write what was detected and decided
  std::string pinMode;     // TERN_PIN_PROGRESS: auto|on|off
  int gpu;                 // TERN_GPU: this rank's GPU index (-1: local rank mod GPUs)
  std::string ucxNetDevices;  // decided from the topology, for UCX (not an env var)
  bool blocking = true;    // ternConfig_t.blocking (no env var)
  int flowClasses;         // TERN_FLOW_CLASSES: network flow classes the levels map onto
  int dscp[8];             // DSCP per flow class, resolved by comm/config.cc
  std::string dscpList;    // TERN_FLOW_DSCP as given ("46,18,10"; empty: defaults)
  // UCX contexts per flow class (IB / RoCE), resolved by comm/config.cc; -1:
  // leave UCX's own setting (UCX_IB_SL / UCX_IB_TRAFFIC_CLASS).
  int ibSl[8];             // service level 0..15
  int ibTrafficClass[8];   // traffic class byte 0..255 (RoCE: the IP TOS byte)
  std::string ibSlList;    // TERN_UCX_IB_SL as given ("0,1,2"; empty: UCX's)
  std::string ibTcList;    // TERN_UCX_IB_TRAFFIC_CLASS as given (empty: DSCP << 2)
  ternTernaryConfig_t ternary{};  // TERN_TERNARY_*, resolved in comm/config.cc
  std::string malformedEnv;  // the first malformed number read ("TERN_X=\"abc\" is not ...")
};

// Reads the environment once per call (comms made later see new values).
Config readConfig();

}  // namespace tern
