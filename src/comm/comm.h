// The communicator: who we are, the table of connections to every peer (one
// per priority level, opened on first use, plus an authenticated control
// socket: transport/conn_table.h), the executor that runs operations over
// them, and the error state every API call consults.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/attachments.h"
#include "comm/bootstrap.h"
#include "base/env.h"
#include "model/collective_model.h"
#include "base/spin_lock.h"
#include "engine/executor.h"
#include "topology/hosts.h"
#include "transport/conn_table.h"
#include "transport/transport.h"

struct ternComm : public tern::EngineHost {
  int rank = 0, nranks = 0;
  tern::Config cfg;
  tern::Secret secret{};
  std::vector<tern::PeerInfo> peers;
  // Which ranks share a host (from the peers' host identities): host count,
  // local rank and local size for the plans (PlanCtx::hosts) and placement.
  tern::HostLayout hosts;
  // The cost model TERN_ALGO=auto asks (TERN_MODEL_FILE; null: auto's rule).
  std::shared_ptr<const tern::model::Model> model;
  uint64_t modelHash = 0;  // of its canonical text: every rank's must agree
  // Ring order: ring[i] is the rank at position i; ranks of one host are
  // contiguous (hosts in order of their lowest rank), so the ring crosses
  // each host boundary once.  ringPos[r] is rank r's position.
  std::vector<int> ring, ringPos;
  // Every (peer, level) connection, self included, and the control socket
  // to each peer (liveness, the notice a failing rank sends before it
  // closes, the openings of connections).
  std::unique_ptr<tern::ConnTable> table;
  std::unique_ptr<tern::Trace> trace;                // TERN_TRACE (null: off)
  std::unique_ptr<tern::Executor> engine;
  // What layers above keep with the communicator (the ternary allreduce's
  // options, call index and residuals: collectives/ternary.h).
  tern::Attachments attached;
  std::atomic<int> asyncError{ternSuccess};         // first failure, sticky
  std::atomic<bool> aborted{false};
  // Threads inside an API call that uses this communicator (api/): destroy
  // and abort free it only once they have all left.
  std::atomic<int> callers{0};
  // Weight streams opened with each peer: the next one's id (both ends count
  // the same opens in the same order; api/weight_stream.cc checks it).
  std::mutex streamsMu;
  std::vector<int> streamsOpened;

  // The connections and ring a plan at `level` works with.
  // Inline: the small path asks for it on every call.  Host buffers; a call
  // on a stream brings its own memory operations (issue).
  tern::PlanCtx planCtx(int level) const {
    tern::PlanCtx x;
    x.rank = rank;
    x.nranks = nranks;
    x.ring = &ring;
    x.ringPos = &ringPos;
    x.cfg = &cfg;
    x.mem = hostMem;
    x.conns = &table->view(level);
    x.hosts = &hosts;
    x.model = model.get();
    return x;
  }
  const tern::MemOps* const hostMem = tern::memOps(tern::MemType::Host);
  // Numbers the operations (per level; p2p per peer, direction and level) and
  // hands them to the executor, atomically: issue order is admission order.
  void issue(const std::vector<tern::OpPtr>& ops, bool wake);
  // A blocking small call (or a group's transfers) of host buffers on an
  // idle communicator: numbered and run on the caller's thread
  // (InlineRunner::runAlone).  False when it does not apply (nothing done:
  // issue as usual); true when numbered and complete or handed to the
  // engine: wait for them.
  bool issueAlone(const std::vector<tern::OpPtr>& ops);
  // What the decision to run work inline (engine/inline_choice.h) needs to
  // know of this communicator.
  tern::InlineSettings inlineSettings() const {
    return {cfg.smallPath, cfg.blocking, trace != nullptr, cfg.smallBytes, nranks};
  }
  // The small path's start: the drive token if the engine is idle, and the
  // level's next sequence number (false: neither).
  bool claimAlone(int level, uint64_t* seq);
  // The same for a group's transfers without operations (comm/inline_calls.cc):
  // transfer t[i] with its peer at its level; sends take the next number of
  // their (peer, level) as issued, receives the engine's next as started
  // (into seqs[i]).
  struct Transfer {
    int peer, level;
    bool send;
  };
  bool claimTransfers(const Transfer* t, uint64_t* seqs, size_t n);
  // ternCommDestroy: the descriptors its streams still owe (StreamMarks::owed, the
  // checks of the last rooted calls) are heard before they close, so a
  // mismatch there is reported, and no peer's bytes sit unread on a socket
  // that closes (tcp would reset the connection, and could drop what this
  // rank sent last).  Up to the timeout; a peer that exited is not waited for.
  ternResult_t hearOwed();
  // Sizes the per-peer bookkeeping once the peers are known.
  void startBookkeeping();

  // Marks the communicator failed and shuts every socket down, so peers
  // blocked on us fail fast instead of waiting out their timeout.
  void fail(ternResult_t r);
  // Reads the control sockets now (the table's thread does as messages
  // arrive): a notice from a peer fails us with its sentence; a closed one
  // marks that peer's connections gone.
  void refreshLiveness();
  // Bytes put on / taken off the wire (self connections never leave).
  void wireBytes(uint64_t* sent, uint64_t* recv) const;
  // The same per flow class (kLevels entries; classes past cfg.flowClasses stay 0).
  void wireBytesByClass(uint64_t* sent, uint64_t* recv) const;
  const char* transportName(int peer) const;

  // What failed the communicator first (empty while it is healthy): the
  // sentence a call that finds it failed records as its thread's.
  std::string failureReason();

  // tern::EngineHost
  ternResult_t checkHealth() override;
  void onFailure(ternResult_t r, const std::string& why) override;
  ternResult_t firstFailure(ternResult_t r, std::string* why) override;

  // Fails the communicator with the sentence that says why (a peer's notice
  // comes through here too).
  void failWith(ternResult_t r, const std::string& why);

  ~ternComm() override;

 private:
  std::mutex errMu;
  std::string failReason;
  tern::SpinLock issueMu;  // held for a few hundred instructions (base/spin_lock.h)
  void number(tern::Operation& op);  // its plan context and sequence number (issueMu held)
  uint64_t collSeq[tern::kLevels] = {};
  std::vector<uint64_t> p2pSeq;            // sends issued, [peer * kLevels + level]
};

namespace tern {
using Comm = ::ternComm;

// Creates a communicator: rendezvous through the root, authenticated mesh,
// a transport per peer and level, and the executor.
// `config` (may be NULL) overrides the environment (comm/config.h).
ternResult_t commCreate(int nranks, int rank, const IdContents& id, const ternConfig_t* config,
                        Comm** out);
// Reads the host topology and decides this rank's GPU, NIC and progress-thread
// CPUs (returned in bindCpus; empty: leave unbound); writes TERN_TOPO_DUMP.
ternResult_t placeComm(Comm& c, std::vector<int>* bindCpus);
}  // namespace tern
