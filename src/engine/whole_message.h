// One message, whole, on a stream: what the inline runner (inline_runner.cc)
// does with each step.  A step's input is read only when the peer's whole
// message (padding, descriptor, payload) is there, its output is written
// whole, descriptor first, in one commit.  The bytes on every stream are the
// ones advance() (program.cc) would have written, so a peer that runs the
// same operation through the engine's rounds matches.  Inline, in a header
// read by inline_runner.cc alone: these are the small path's inner loop.
#pragma once
#include <cstring>

#include "engine/descriptors.h"
#include "engine/operation.h"
#include "engine/step_payload.h"
#include "engine/stream_marks.h"
#include "transport/shm_streams.h"

namespace tern {
namespace whole {

// Whether the path can run a phase: every connection open, moving bytes
// without pumps (shared memory), its stream free, and every step a plain
// one (no codec framing, no single-copy header, no low-latency sibling).
inline bool takesWhole(const Step& s, uint64_t opBytes) {
  if (s.codec) return false;
  // Open first: what a connection agreed with its peer (its single-copy
  // threshold, its sibling: Conn::settle) is written by the opening thread
  // until then.
  for (Conn* k : {s.in, s.out})
    if (k && (k->openState.load(std::memory_order_acquire) != Conn::kOpen || claimed(k) || !k->carriesWhole(opBytes)))
      return false;
  return !directCandidate(s);
}

// A program with a reduction of its own goes to the engine too: the path
// reduces by the phase's (selecting per program cost its 8-byte broadcast
// ~25 instructions a call).
inline bool runsWhole(const Phase& ph, uint64_t opBytes) {
  for (const Program& p : ph.progs) {
    if (p.red) return false;
    for (const Step& s : p.steps)
      if (!takesWhole(s, opBytes)) return false;
  }
  return true;
}

// A step's stream: through its shared-memory fifos where it has them
// (Conn::shm: inline, no virtual call), else through the connection.
class Stream {
 public:
  explicit Stream(Conn* c) : c_(c), io_(c ? c->shm : nullptr) {}
  explicit operator bool() const { return c_ != nullptr; }
  size_t recordAlign() const { return io_ ? ShmStreams::kRecordAlign : c_->recordAlign(); }
  uint64_t recvPos() const { return io_ ? io_->recvPos() : c_->recvPos(); }
  uint64_t sendPos() const { return io_ ? io_->sendPos() : c_->sendPos(); }
  size_t recvAhead(const char** p) const { return io_ ? io_->recvAhead(p) : c_->recvAhead(p); }
  void recvFound(const char* at, size_t n) const { io_ ? io_->recvFound(at, n) : c_->recvFound(at, n); }
  size_t recvAvail(const char** p) const { return io_ ? io_->recvAvail(p) : c_->recvAvail(p); }
  size_t sendSpace(char** p) const { return io_ ? io_->sendSpace(p) : c_->sendSpace(p); }
  // After sendSpace: n bytes now would fault in ring pages that a moment's
  // wait for the peer would not (Fifo::outrunsWindow; shared memory only).
  bool sendOutruns(size_t n) const { return io_ && io_->sendOutruns(n); }
  void recvConsume(size_t n) const {
    if (!io_) return c_->recvConsume(n);
    io_->recvConsume(n);
    c_->countRecv(n);
  }
  void sendCommit(size_t n) const {  // and flush: shared memory publishes on commit
    if (!io_) return c_->sendCommit(n), c_->flush();
    io_->sendCommit(n);
    c_->countSent(n);
  }

 private:
  Conn* c_;
  ShmStreams* io_;
};

// What stands on a stream before a step's payload: padding to the record
// alignment and the operation's descriptor on its first use of the stream,
// else padding to 8 bytes.
struct Head {
  size_t skip, desc;
  size_t bytes() const { return skip + desc; }
};
inline Head headOf(size_t align, uint64_t pos, bool greeted) {
  return greeted ? Head{alignUp(pos, 8), 0} : Head{recordSkip(pos, align), sizeof(OpDesc)};
}

enum class Try { kDone, kWait, kEngine };

// A step's work on its whole payload.  The path runs host buffers only
// (runsInline, inline_choice.h), so a plain step's copies are memcpy here,
// without executeStep's call and MemOps' virtual one (~60 of an 8-byte
// broadcast's instructions); reductions are executeStep's.
inline void runWhole(const MemOps& mem, const Step& s, const char* in, char* out, const Reduction& red, int nranks) {
  if (s.reduce) return executeStep(mem, s, in, out, 0, s.bytes, red, nranks);
  const char* src = in ? in : s.local;
  if (out) memcpy(out, src, s.bytes);
  if (s.dst && s.dst != src) memcpy(s.dst, src, s.bytes);
}

// Whether the message a step greets its input stream with is all there,
// read where the stream's next bytes lie (Conn::recvAhead) by its seq word
// (kSeqWhole, written last): the fifo's head, another line the writer
// stores to, is then not read at all.  Only a whole descriptor that matches
// ours counts; anything else (bytes not come, a message the engine wrote, a
// stale one, a mismatch) leaves the reading to the head, as before.  *ip:
// the message's first byte (its padding).
[[gnu::always_inline]] inline bool foundAhead(const Stream& c, const OpDesc& desc, size_t bytes, size_t skip,
                                              const char** ip) {
  if (c.recvAhead(ip) < bytes) return false;
  const char* d = *ip + skip;
  if (wholeSeq(d) != (desc.seq | kSeqWhole) || !descMatches(desc, descAt(d))) return false;
  c.recvFound(*ip, bytes);
  return true;
}

// The descriptors the stream owes (StreamMarks::owed), consumed while each lies
// whole at the stream's next record (foundAhead): true once none is owed.
// Anything else (one not come, one the engine wrote, a mismatch) is for
// peekPast to read.
inline bool payOwedWhole(const Stream& st, Conn* in) {
  OwedDescs& owed = marks(in).owed;
  while (!owed.empty()) {
    const Head h = headOf(st.recordAlign(), st.recvPos(), false);  // a lone descriptor
    const char* ip;
    if (!foundAhead(st, owed.front(), h.bytes(), h.skip, &ip)) return false;
    st.recvConsume(h.bytes());
    owed.pop();
  }
  return true;
}

// Whether a whole message with our sequence number lies where the stream's
// next record will (its descriptor may still differ: a mismatch).
inline bool oursAhead(const Stream& st, const OpDesc& mine, size_t n, size_t skip) {
  const char* ip;
  return st.recvAhead(&ip) >= n && wholeSeq(ip + skip) == (mine.seq | kSeqWhole);
}

// hear() for the path: the owed descriptors, then ours, found whole where
// they lie.  A stream that can owe one more and shows nothing of ours there
// is not read further: the check is owed (phaseThrough) and made by a later
// read (payOwedWhole, peekPast, ternCommDestroy), as a deferrable hear
// allows.  Reading its head instead cost the sender a cache line the peer
// writes with every greet: a cross-core transfer on its path per call.
// While the stream owes some and can owe more, it is not read at all: the
// owed checks are read together once the queue is full (lines in a row,
// which the peer has long finished writing), not one line the peer has just
// written per call (2-rank 8-64 B broadcast 0.83-0.87x the time, 10
// interleaved rounds; a mismatch owed is found at the same point as before,
// when the queue fills, and one on an empty queue still at once).
// Whatever else is there (a mismatch, a message the engine wrote, a full
// owed queue) is hear()'s.
inline Heard hearWhole(Conn* in, const OpDesc& mine, OpDesc* theirs) {
  const OwedDescs& owed = marks(in).owed;
  if (!owed.empty() && !owed.full()) return Heard::kNotYet;
  const Stream st(in);
  if (!payOwedWhole(st, in)) return owed.full() ? hear(in, mine, theirs) : Heard::kNotYet;
  const Head h = headOf(st.recordAlign(), st.recvPos(), false);  // our descriptor, alone
  const char* ip;
  if (foundAhead(st, mine, h.bytes(), h.skip, &ip)) {
    st.recvConsume(h.bytes());
    return Heard::kMatched;
  }
  return owed.full() || oursAhead(st, mine, h.bytes(), h.skip) ? hear(in, mine, theirs) : Heard::kNotYet;
}

// One step, whole: kWait while the peer's message has not all arrived,
// kEngine when the engine must carry it (see the top).  `greetIn` / `greetOut`:
// the operation's first use of the step's input / output stream, so its
// descriptor leads the message.
[[gnu::always_inline]] inline Try moveWhole(const Step& s, const OpDesc& desc, bool greetIn, bool greetOut, const MemOps& mem,
              const Reduction& red, int nranks) {
  const char* in = nullptr;
  Head hi{0, 0}, ho{0, 0};
  const Stream sin(s.in), sout(s.out);
  if (sin) {
    if (greetIn && !payOwedWhole(sin, s.in)) {  // the descriptors it owes come first
      OpDesc due;
      bool mismatch;
      if (!peekPast(s.in, &due, &mismatch)) return Try::kWait;
      if (mismatch) return Try::kEngine;
    }
    hi = headOf(sin.recordAlign(), sin.recvPos(), !greetIn);
    const char* ip;
    if (!(hi.desc && marks(s.in).owed.empty() && foundAhead(sin, desc, hi.bytes() + s.bytes, hi.skip, &ip))) {
      if (sin.recvAvail(&ip) < hi.bytes() + s.bytes) return Try::kWait;
      if (hi.desc && !descMatches(desc, descAt(ip + hi.skip))) return Try::kEngine;
    }
    in = ip + hi.bytes();
  }
  char* out = nullptr;
  if (sout) {
    ho = headOf(sout.recordAlign(), sout.sendPos(), !greetOut);
    char* o;
    if (sout.sendSpace(&o) < ho.bytes() + s.bytes) return Try::kEngine;
    // A sender that runs ahead of its reader (a rooted collective's, whose
    // checks are owed) never found the ring empty, so never restarted it,
    // and wrote on into pages not yet touched: a fault on each side every
    // 4 KiB (~10 us each on this project's VM), for a whole lap of the
    // ring.  Waiting for the reader keeps the path in resident pages; a
    // reader that does not come hands the step to the engine (Patience).
    if (sout.sendOutruns(ho.bytes() + s.bytes)) return Try::kWait;
    if (ho.desc) putWholeDesc(o + ho.skip, desc);  // its seq word last (markWhole, below)
    out = o + ho.bytes();
  }
  if (s.bytes) runWhole(mem, s, in, out, red, nranks);
  if (ho.desc) markWhole(out - sizeof(OpDesc), desc.seq);
  if (sin) sin.recvConsume(hi.bytes() + s.bytes);
  if (sout) sout.sendCommit(ho.bytes() + s.bytes);
  return Try::kDone;
}

}  // namespace whole
}  // namespace tern
