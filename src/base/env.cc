#include "base/env.h"

#include <algorithm>
#include <cstdlib>

namespace tern {

std::string envString(const char* name, const std::string& dflt) {
  const char* v = getenv(name);
  return (v && *v) ? std::string(v) : dflt;
}

// A malformed number is remembered (the first one, in *malformed) so the
// communicator can refuse it with a sentence instead of silently running on
// the default the user did not ask for.
static void noteMalformed(const char* name, const char* v, const char* what, std::string* malformed) {
  if (malformed && malformed->empty())
    *malformed = std::string(name) + "=\"" + v + "\" is not " + what;
}

long long envInt(const char* name, long long dflt, std::string* malformed) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long long x = strtoll(v, &end, 0);
  if (end && *end == '\0') return x;
  noteMalformed(name, v, "an integer", malformed);
  return dflt;
}

double envDouble(const char* name, double dflt, std::string* malformed) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  double x = strtod(v, &end);
  if (end && *end == '\0') return x;
  noteMalformed(name, v, "a number", malformed);
  return dflt;
}

bool envSet(const char* name) {
  const char* v = getenv(name);
  return v && *v;
}

static size_t roundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

Config readConfig() {
  Config c;
  std::string* bad = &c.malformedEnv;
  c.timeoutSec = envDouble("TERN_TIMEOUT", 300.0, bad);
  if (c.timeoutSec <= 0) c.timeoutSec = 300.0;
  // A rank answers a handshake in milliseconds; a connection that takes
  // longer is a stranger (or a peer too loaded to matter) and is dropped.
  c.handshakeSec = envDouble("TERN_HANDSHAKE_TIMEOUT", 5.0, bad);
  if (c.handshakeSec <= 0) c.handshakeSec = 5.0;
  c.priorityHoldSec = std::max<long long>(envInt("TERN_PRIORITY_HOLD_US", 2000, bad), 0) * 1e-6;
  // The fifo must hold a few chunks so every ring step can be posted at once.
  c.chunkBytes = roundUp(std::max<long long>(envInt("TERN_CHUNKSIZE", 512 << 10, bad), 64), 64);
  c.fifoBytes = roundUp(std::max<long long>(envInt("TERN_BUFFSIZE", 4 << 20, bad), 4096), 4096);
  if (c.fifoBytes < 4 * c.chunkBytes) c.fifoBytes = roundUp(4 * c.chunkBytes, 4096);
  c.fifoGranule = 4096;  // resolveConfig raises it to the ternary quantum
  c.fifoWindow = static_cast<size_t>(std::max<long long>(envInt("TERN_FIFO_WINDOW", 4096, bad), 0));
  c.smallBytes = static_cast<size_t>(envInt("TERN_SMALL_THRESHOLD", 32 << 10, bad));
  if (c.smallBytes > c.fifoBytes / 4) c.smallBytes = c.fifoBytes / 4;
  // Off: on this project's host single copy (process_vm_readv) moves
  // 7-11 GB/s against 17-63 for the fifo's two in-cache copies, and with
  // 128 KiB (its default from 2026-11-28) plain transfers of 256 KiB-64 MiB
  // took 1.2-3.2x the fifo's time at 2 ranks (perf/RESULTS.md, 2026-12-01).
  c.shmDirectBytes = static_cast<size_t>(std::max<long long>(envInt("TERN_SHM_DIRECT", 0, bad), 0));
  // Device buffers: staging costs two PCIe crossings a side, IPC one
  // device copy; below this the posting round trip is not worth it.
  c.shmIpcBytes = static_cast<size_t>(std::max<long long>(envInt("TERN_SHM_IPC", 64 << 10, bad), 0));
  c.transport = envString("TERN_TRANSPORT", "auto");
  c.net = envString("TERN_NET", "auto");
  c.algo = envString("TERN_ALGO", "auto");
  c.modelFile = envString("TERN_MODEL_FILE", "");
  // What a more urgent level finds ahead of it in the kernel and the qdisc
  // (perf/RESULTS.md, 2026-11-28): tcp only, and only on levels less urgent
  // than one in use (engine/executor.cc urgentInUse, transport/tcp.cc).
  c.bulkQueued = static_cast<size_t>(std::max<long long>(envInt("TERN_BULK_QUEUED", 256 << 10, bad), 0));
  c.tcpUnstaged = static_cast<size_t>(std::max<long long>(envInt("TERN_TCP_UNSTAGED", 64 << 10, bad), 0));
  c.smallPath = envInt("TERN_SMALL_PATH", 1, bad) != 0;  // the inline runner (engine/inline_runner.cc)
  // Small operations over shm cross in flagged cache lines (transport/ll.h).
  // 24: a descriptor and its payload fill one line.  Messages of two lines
  // and more measured slower than the fifo on the 2-core test host
  // (perf/RESULTS.md, 2026-11-25): the fifo's one head word and a plain copy
  // beat a flag per line there.
  c.llBytes = static_cast<size_t>(std::min<long long>(std::max<long long>(envInt("TERN_LL_BYTES", 0, bad), 0), 32 << 10));
  c.ifname = envString("TERN_SOCKET_IFNAME", "");
  c.topoXml = envString("TERN_TOPO_XML", "");
  c.topoDump = envString("TERN_TOPO_DUMP", "");
  c.pinMode = envString("TERN_PIN_PROGRESS", "auto");
  c.gpu = static_cast<int>(envInt("TERN_GPU", -1, bad));
  c.flowClasses = static_cast<int>(envInt("TERN_FLOW_CLASSES", 3, bad));
  // Checked and turned into dscp[] with the config struct (comm/config.cc):
  // its count must match the flow classes, which the struct may change.
  c.dscpList = envString("TERN_FLOW_DSCP", "");
  for (int& d : c.dscp) d = 0;
  c.ibSlList = envString("TERN_UCX_IB_SL", "");
  c.ibTcList = envString("TERN_UCX_IB_TRAFFIC_CLASS", "");
  for (int k = 0; k < 8; ++k) c.ibSl[k] = c.ibTrafficClass[k] = -1;
  return c;
}

}  // namespace tern
