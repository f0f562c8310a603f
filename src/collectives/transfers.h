// Plain transfers between the callers' buffers as a plan's programs: the
// all-to-all family (alltoall.cc), the two-rank broadcast, the two-rank
// pair forms, and
// the descriptor a rooted plan would leave unread (greet / hear).
#pragma once
#include "engine/program.h"

namespace tern {

// Both 2-rank pair forms start at blocks of kPairFromBytes: at 128 KiB
// blocks through the fifo the allgather's ran at 0.96-0.97x the ring's
// speed and the reduce-scatter's at 0.93x; from 256 KiB at 1.01x and
// 1.00-1.16x (perf/RESULTS.md, "2026-12-06: the 2-rank allgather as a pair
// of transfers" and "2026-12-06: the 2-rank reduce-scatter as a pair of
// transfers").
constexpr size_t kPairFromBytes = 256 << 10;
// A 2-rank pair form (allgather.cc, reduce_scatter.cc): a send and a
// receive as programs of their own, direct steps (both ends plan alike), so
// either may go one copy, or be reduced straight out of a mapping.
inline void planPair(Phase* ph, Step send, Step recv) {
  ph->progs.resize(2);
  send.direct = recv.direct = true;
  ph->progs[0].add(send);
  ph->progs[1].add(recv);
}

// Adds a plan's transfers, sends before receives: each its own program, or
// all in one (`one`: the small-block form).  A zero-byte transfer is the
// descriptor alone.
class Transfers {
 public:
  // A fresh phase may hold one empty program whose step storage was kept
  // (resetPhase): the first program is that one.
  Transfers(Phase* ph, bool one)
      : ph_(ph), one_(one), spare_(ph->progs.size() == 1 && ph->progs[0].steps.empty()) {
    if (one) ph->progs.resize(1);
  }
  void send(Conn* to, const char* src, size_t bytes) { add(nullptr, to, src, nullptr, bytes); }
  // A send that also copies its source into this rank's `own` buffer on the
  // way (Step::dst): one pass over the source.
  void sendKeeping(Conn* to, const char* src, char* own, size_t bytes) {
    add(nullptr, to, src, own != src ? own : nullptr, bytes);
  }
  void recv(Conn* from, char* dst, size_t bytes) { add(from, nullptr, nullptr, dst, bytes); }
  // A rooted plan's check that ranks agree on the root: a rank that only
  // receives from a peer greets it (its descriptor alone), and the peer, which
  // only sends to it, hears that descriptor without waiting for it
  // (Step::deferrable): it is checked if it comes during the call, else by the
  // stream's next reader.  Ranks that both think they are the root then find
  // out in this call when one's data arrives while the other still runs (a
  // large transfer, single copy), else in their next call on the stream.
  //
  // Only while the sender's transfer to that peer (`bytes`) is at most
  // kHearAheadMax; above it the sender waits for the descriptor as before.
  // A sender that runs ahead keeps its fifo from ever being empty, so the
  // fifo never restarts at its first pages (transport/fifo.h): it walks its
  // whole ring, faulting pages in on the first lap.  From 1 KiB messages
  // that showed: peak RSS of a broadcast loop 8.9 -> 10.3-11.4 MB, and a
  // 50-call 64 KiB broadcast at 0.17x OpenMPI's rate (at 4 KiB, runs of
  // 2,000 calls 1.5x slower, of 20,000 0.66x; perf/RESULTS.md, 2026-11-29:
  // rooted collectives stop waiting for their peers' descriptors).
  static constexpr size_t kHearAheadMax = 512;
  void greet(Conn* to) { add(nullptr, to, nullptr, nullptr, 0); }
  void hear(Conn* from, size_t bytes) {
    add(from, nullptr, nullptr, nullptr, 0);
    ph_->progs.back().steps.back().deferrable = bytes <= kHearAheadMax;
  }
  // This rank's own block: a step with no connection (a local copy), added
  // after the sends so the peers get their blocks before we spend time on it.
  void local(const char* src, char* dst, size_t bytes) {
    if (src != dst && bytes > 0) add(nullptr, nullptr, src, dst, bytes);
  }

 private:
  void add(Conn* in, Conn* out, const char* src, char* dst, size_t bytes) {
    Step s{in, out, src, dst, bytes};
    // Single copy only as programs of their own: a direct send is done once
    // its receiver has read it, and in one program that receiver reads only
    // after its own sends.
    s.direct = !one_ && bytes > 0 && (in || out);
    if (!one_ && !spare_) ph_->progs.emplace_back();
    spare_ = false;
    ph_->progs.back().steps.push_back(s);
  }
  Phase* ph_;
  bool one_, spare_;
};

}  // namespace tern
