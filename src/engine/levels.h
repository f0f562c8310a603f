// The admitted operations, one list per priority level (the driver's only:
// the drive token's holder), and the order within a level that makes
// per-level matching across ranks work: each level has its own connections
// (streams), and on them a collective starts only after every earlier
// operation of its level has completed; a send or receive starts after the
// earlier collectives of its level and the earlier transfers in the same
// direction with the same peer.  Sends and receives otherwise progress
// concurrently, so matched pairs never deadlock.  Also which levels are in
// use (the bound on less urgent levels' kernel queues) and the numbering of
// receives, which happens when they start.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/drive_token.h"
#include "engine/operation.h"

namespace tern {

class Levels {
 public:
  using List = std::vector<OpPtr>;
  explicit Levels(int rank) : rank_(rank) {}

  List* begin() { return active_; }
  List* end() { return active_ + kLevels; }
  const List* begin() const { return active_; }
  const List* end() const { return active_ + kLevels; }
  List& operator[](int level) { return active_[level]; }
  int levelOf(const List& list) const { return static_cast<int>(&list - active_); }

  // Into its level's list.
  void enlist(const OpPtr& op);
  // A level has work now (urgentInUse).
  void noteInUse(int level);
  // Whether a level more urgent than `level` has work or had some lately.
  bool urgentInUse(int level) const;
  // Whether a level less urgent than `list`'s has work.
  bool anyActiveBelow(const List& list) const;
  // Whether an operation at `level` or more urgent is listed and not done
  // (lists keep done ones until the round that erases them).
  bool anyLiveAtOrAbove(int level) const;
  // Whether list[i] may run now (issue order: see the top).
  bool runnable(const List& list, size_t i) const;
  // Picks the sender of an unbound any-source receive list[i], if one sent.
  ternResult_t bindSource(const List& list, size_t i, bool* bound);
  // The sequence number of the next receive from `peer` at `level`.
  uint64_t startRecv(int level, int peer, int nranks);
  uint64_t nextRecvSeq(const Operation& op) { return startRecv(op.level, op.peer, op.ctx.nranks); }
  // Whether any active operation pumps connections; whether all it pumps
  // have a descriptor to poll (and there is at least one).
  bool anyPumps() const;
  bool pumpsPollable() const;

 private:
  const int rank_;
  List active_[kLevels];
  int64_t lastAdmitMs_[kLevels] = {};  // when each level last had work (coarse ms; urgentInUse)
  std::vector<uint64_t> recvSeq_[kLevels];  // receives started, per level and peer
  int lastSource_ = 0;                      // where the next any-source pick starts
};

}  // namespace tern
