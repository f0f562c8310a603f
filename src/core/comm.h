// The communicator: who we are, one connection per peer, the progress engine,
// and the error state every API call consults.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/env.h"
#include "core/progress.h"
#include "transport/transport.h"

namespace tern {
struct TernaryState;
}

struct ternComm {
  int rank = 0, nranks = 0;
  tern::Config cfg;
  tern::Secret secret{};
  std::vector<tern::PeerInfo> peers;
  // Ring order: ring[i] is the rank at position i; ranks of one host are
  // contiguous (hosts in order of their lowest rank), so the ring crosses
  // each host boundary once.  ringPos[r] is rank r's position.
  std::vector<int> ring, ringPos;
  std::vector<int> meshFd;                          // per peer; -1 for self
  std::shared_ptr<tern::UcxShared> ucx;             // UCP context + worker, if used
  std::vector<std::unique_ptr<tern::Conn>> conns;   // per peer, incl. self
  std::unique_ptr<tern::ProgressEngine> engine;
  std::unique_ptr<tern::TernaryState> ternary;      // options, call index, residuals

  std::atomic<int> asyncError{ternSuccess};         // first failure, sticky
  std::atomic<bool> aborted{false};
  std::atomic<unsigned long long> opsDone{0};

  std::mutex errMu;
  std::string lastError;

  // Marks the communicator failed and shuts every socket down, so peers
  // blocked on us fail fast instead of waiting out their timeout.
  void fail(ternResult_t r);
  // Polls the idle mesh sockets of shm peers: one that closed marks its
  // connection gone (the peer exited, failed or aborted).
  void refreshLiveness();
  // Checked by every wait loop: abort and earlier failure are errors; peers'
  // liveness is refreshed for the caller to judge.
  ternResult_t checkHealth();

  // Bytes put on / taken off the wire (self connections never leave).
  void wireBytes(uint64_t* sent, uint64_t* recv) const;

  void setLastError(const std::string& e);
  std::string getLastError();
  ~ternComm();
};

namespace tern {
using Comm = ::ternComm;

// Creates a communicator: rendezvous through the root, authenticated mesh,
// a transport per peer, and the progress thread.
ternResult_t commCreate(int nranks, int rank, const IdContents& id, Comm** out);
// Reads the host topology and decides this rank's GPU, NIC and progress-thread
// CPUs (returned in bindCpus; empty: leave unbound); writes TERN_TOPO_DUMP.
ternResult_t placeComm(Comm& c, std::vector<int>* bindCpus);
}  // namespace tern
