// Plain transfers between the callers' buffers as a plan's programs: the
// all-to-all family (alltoall.cc), the two-rank broadcast and allgather, and
// the descriptor a rooted plan would leave unread (a zero-byte transfer).
#pragma once
#include "engine/program.h"

namespace tern {

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
  void recv(Conn* from, char* dst, size_t bytes) { add(from, nullptr, nullptr, dst, bytes); }
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
