// Levels (levels.h): the active lists per priority level and the order
// within a level.
#include "engine/levels.h"

#include <time.h>

#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "engine/descriptors.h"
#include "engine/stream_marks.h"

namespace tern {

namespace {
// Milliseconds on the coarse monotonic clock (a few ns to read; ticks of a
// few ms, plenty for urgentInUse's ten-second window).
int64_t coarseMs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}
}  // namespace

void Levels::noteInUse(int level) { lastAdmitMs_[level] = coarseMs(); }

void Levels::enlist(const OpPtr& op) {
  noteInUse(op->level);
  active_[op->level].push_back(op);
}

// Priorities in training recur every iteration (seconds apart for large
// models), and the bulk bytes an urgent message finds ahead of it were
// queued before it was issued, so the bound must already hold then: a level
// counts as in use for kUrgentRecentMs after it last had work.  A job with
// one level, or bulk transfers long after anything urgent, run unbounded
// (measured: at 4 ranks on 2 cores and 10 Gbit/s the bound cost a bulk
// allreduce 1.1-1.4x its time; perf/RESULTS.md, 2026-11-28).
bool Levels::urgentInUse(int level) const {
  constexpr int64_t kUrgentRecentMs = 10000;
  const int64_t now = coarseMs();
  for (int l = 0; l < level; ++l)
    if (!active_[l].empty() || (lastAdmitMs_[l] && now - lastAdmitMs_[l] < kUrgentRecentMs)) return true;
  return false;
}

bool Levels::anyActiveBelow(const List& list) const {
  return std::any_of(&list + 1, end(), [](const List& l) { return !l.empty(); });
}

bool Levels::anyLiveAtOrAbove(int level) const {
  for (int l = 0; l <= level && l < kLevels; ++l)
    if (std::any_of(active_[l].begin(), active_[l].end(), [](const OpPtr& op) { return !op->done.load(); }))
      return true;
  return false;
}

// A receive from any source that has not picked its sender yet stands for
// every peer: later receives wait for it (it may pick their peer).
// Unordered operations (weight streams) neither wait nor are waited for.
bool Levels::runnable(const List& list, size_t i) const {
  const Operation& op = *list[i];
  if (op.collective && i == 0) return true;
  if (op.unordered) return true;
  for (size_t j = 0; j < i; ++j) {
    const Operation& e = *list[j];
    if (e.unordered) continue;
    if (op.collective || e.collective || (e.send == op.send && (e.peer == op.peer || e.unbound())))
      return false;
  }
  return true;
}

// The first peer (round robin from the last one picked) whose stream at this
// level holds a send descriptor, among the peers no earlier receive still
// waits on.  Every earlier operation that read that stream has completed
// (collectives before it have; receives from that peer are excluded), so the
// next bytes there are the start of a new operation: padding to 32, then its
// descriptor.
ternResult_t Levels::bindSource(const List& list, size_t i, bool* bound) {
  Operation& op = *list[i];
  const int n = op.ctx.nranks;
  op.pumps.clear();
  for (int k = 1; k <= n && !*bound; ++k) {
    const int q = (lastSource_ + k) % n;
    if (q == rank_ || std::any_of(list.begin(), list.begin() + i, [q](const OpPtr& e) {
          return !e->send && e->peer == q; }))
      continue;
    Conn* c = op.ctx.conn(q);
    // Only what is open: a sender opens its connection (asking a receive
    // from any source to open them all would open every peer's).
    if (c->openState.load(std::memory_order_acquire) != Conn::kOpen) continue;
    if (c->needsProgress()) {
      bool m = false;
      TERN_CHECK(c->progress(&m));
      op.pumps.push_back(c);  // idleWait polls them
    }
    // The kind a receive meets (its kind's peerKind), addressed to us, on
    // the stream or its small sibling (the send's size chose).  A stream in
    // the middle of another's message (a weight stream's chunk) is skipped.
    auto sendToUs = [&](Conn* k) {
      OpDesc d;
      return k && !beingRead(k) && peekDesc(k, &d) && d.kind == opKind(op.desc.kind).peerKind &&
             d.root == rank_;
    };
    if (!sendToUs(c->small(0)) && !sendToUs(c)) continue;
    op.peer = lastSource_ = q;
    op.desc.root = q;
    op.task->bindPeer(q);
    *op.source = q;
    *bound = true;
    TERN_LOG(Trace, "receive from any source takes rank %d's send", q);
  }
  return ternSuccess;
}

// Receives are numbered per peer and level when they start (not when issued):
// a receive from any source learns its peer only then, and receives from one
// peer start in issue order.
uint64_t Levels::startRecv(int level, int peer, int nranks) {
  std::vector<uint64_t>& seq = recvSeq_[level];
  if (seq.size() < static_cast<size_t>(nranks)) seq.resize(nranks, 0);
  return seq[peer]++;
}

bool Levels::pumpsPollable() const {
  bool any = false;
  for (const List& list : active_)
    for (const OpPtr& o : list)
      for (const Conn* c : o->pumps) {
        if (c->pollFd() < 0) return false;
        any = true;
      }
  return any;
}

bool Levels::anyPumps() const {
  for (const List& list : active_)
    for (const OpPtr& o : list)
      if (!o->pumps.empty()) return true;
  return false;
}

}  // namespace tern
