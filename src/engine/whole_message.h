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
  Conn* conn() const { return c_; }
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
// alignment and the operation's descriptor record (`desc` bytes: whole, or a
// repeat of the stream's last) on its first use of the stream, else (`desc`
// 0) padding to 8 bytes.
struct Head {
  size_t skip, desc;
  size_t bytes() const { return skip + desc; }
};
inline Head headOf(size_t align, uint64_t pos, size_t desc) {
  return desc ? Head{recordSkip(pos, align), desc} : Head{alignUp(pos, 8), 0};
}

// Where the path polls for the peer's descriptor that matches `mine`: the
// record's length and the word that ends it once the message is whole
// (op_desc.h, markWhole).  A guess from the last descriptor heard on the
// stream: with mine's seq, the peer's repeats it in one word (a peer whose
// call matches ours and equals its last but for the seq sends exactly
// that); else it comes whole.  The guess is not checked against ours here,
// on every turn of a wait, but once the word is found (foundAhead).  A wrong
// guess costs a read of the record where it lies (descRecordAt), never a
// wrong match: a repeat's word carries its seq, so it equals `word` only
// for `next`.
struct Expect {
  size_t bytes;
  uint64_t word;
  OpDesc next;  // the peer's descriptor, if it repeats
};
inline Expect expectOn(Conn* in, const OpDesc& mine) {
  const OpDesc& heard = marks(in).heard;
  Expect e{sizeof(OpDesc), mine.seq | kSeqWhole, heard};
  e.next.seq = mine.seq;
  if (repeats(heard, e.next)) e.bytes = kRepeatBytes, e.word = repeatWord(mine) | kSeqWhole;
  return e;
}

// Consumes `n` bytes from a step's input stream, a descriptor `d` heard
// among them (the one the next may repeat).
inline void takeWith(const Stream& st, const OpDesc& d, size_t n) {
  st.recvConsume(n);
  marks(st.conn()).heard = d;
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
// read where the stream's next bytes lie (Conn::recvAhead) by the word that
// ends its descriptor record (kSeqWhole, written last): the fifo's head,
// another line the writer stores to, is then not read at all.  Only the
// record expected (expectOn) with a descriptor that matches ours counts;
// anything else (bytes not come, a message the engine wrote, a stale one, a
// mismatch, a record other than the one guessed) leaves the reading to the
// head.  *ip: the message's first byte (its padding); *theirs: the peer's
// descriptor, for takeWith.
[[gnu::always_inline]] inline bool foundAhead(const Stream& c, const OpDesc& mine, const Expect& e,
                                              size_t skip, size_t payload, const char** ip, OpDesc* theirs) {
  const size_t bytes = skip + e.bytes + payload;
  if (c.recvAhead(ip) < bytes) return false;
  const char* d = *ip + skip;
  if (wholeWordIn(d, e.bytes) != e.word) return false;
  *theirs = e.bytes == kRepeatBytes ? e.next : descAt(d);
  if (!descMatches(mine, *theirs)) return false;
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
    const Expect e = expectOn(in, owed.front());
    const Head h = headOf(st.recordAlign(), st.recvPos(), e.bytes);  // a lone descriptor
    const char* ip;
    OpDesc theirs;
    if (!foundAhead(st, owed.front(), e, h.skip, 0, &ip, &theirs)) return false;
    takeWith(st, theirs, h.bytes());
    owed.pop();
  }
  return true;
}

// Whether a whole message with our sequence number lies where the stream's
// next record will (its descriptor may still differ: a mismatch).
inline bool oursAhead(const Stream& st, const Expect& e, size_t skip) {
  const char* ip;
  return st.recvAhead(&ip) >= skip + e.bytes && wholeWordIn(ip + skip, e.bytes) == e.word;
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
  const Expect e = expectOn(in, mine);
  const Head h = headOf(st.recordAlign(), st.recvPos(), e.bytes);  // our descriptor, alone
  const char* ip;
  if (foundAhead(st, mine, e, h.skip, 0, &ip, theirs)) {
    takeWith(st, *theirs, h.bytes());
    return Heard::kMatched;
  }
  return owed.full() || oursAhead(st, e, h.skip) ? hear(in, mine, theirs) : Heard::kNotYet;
}

// One step, whole: kWait while the peer's message has not all arrived,
// kEngine when the engine must carry it (see the top).  `greetIn` / `greetOut`:
// the operation's first use of the step's input / output stream, so its
// descriptor leads the message.
[[gnu::always_inline]] inline Try moveWhole(const Step& s, const OpDesc& desc, bool greetIn, bool greetOut, const MemOps& mem,
              const Reduction& red, int nranks) {
  const char* in = nullptr;
  Head hi{0, 0}, ho{0, 0};
  OpDesc theirs;
  const Stream sin(s.in), sout(s.out);
  if (sin) {
    if (greetIn && !payOwedWhole(sin, s.in)) {  // the descriptors it owes come first
      OpDesc due;
      bool mismatch;
      if (!peekPast(s.in, &due, &mismatch)) return Try::kWait;
      if (mismatch) return Try::kEngine;
    }
    const Expect e = greetIn ? expectOn(s.in, desc) : Expect{};
    hi = headOf(sin.recordAlign(), sin.recvPos(), e.bytes);
    const char* ip;
    if (!(hi.desc && marks(s.in).owed.empty() && foundAhead(sin, desc, e, hi.skip, s.bytes, &ip, &theirs))) {
      const size_t avail = sin.recvAvail(&ip);
      if (hi.desc) {  // the record that came, whatever was guessed
        if (avail < hi.skip ||
            !(hi.desc = descRecordAt(ip + hi.skip, avail - hi.skip, marks(s.in).heard, &theirs)))
          return Try::kWait;
        if (!descMatches(desc, theirs)) return Try::kEngine;
      }
      if (avail < hi.bytes() + s.bytes) return Try::kWait;
    }
    in = ip + hi.bytes();
  }
  char* out = nullptr;
  if (sout) {
    ho = headOf(sout.recordAlign(), sout.sendPos(), greetOut ? descBytesAfter(marks(s.out).sent, desc) : 0);
    char* o;
    if (sout.sendSpace(&o) < ho.bytes() + s.bytes) return Try::kEngine;
    // A sender that runs ahead of its reader (a rooted collective's, whose
    // checks are owed) never found the ring empty, so never restarted it,
    // and wrote on into pages not yet touched: a fault on each side every
    // 4 KiB (~10 us each on this project's VM), for a whole lap of the
    // ring.  Waiting for the reader keeps the path in resident pages; a
    // reader that does not come hands the step to the engine (Patience).
    if (sout.sendOutruns(ho.bytes() + s.bytes)) return Try::kWait;
    if (ho.desc) putWholeDesc(o + ho.skip, desc, ho.desc);  // its last word last (markWhole, below)
    out = o + ho.bytes();
  }
  if (s.bytes) runWhole(mem, s, in, out, red, nranks);
  if (ho.desc) {
    OpDesc& sent = marks(s.out).sent;
    markWhole(out - ho.desc, ho.desc, wholeWord(desc, ho.desc));
    sent = desc;
  }
  if (sin) hi.desc ? takeWith(sin, theirs, hi.bytes() + s.bytes) : sin.recvConsume(hi.bytes() + s.bytes);
  if (sout) sout.sendCommit(ho.bytes() + s.bytes);
  return Try::kDone;
}

}  // namespace whole
}  // namespace tern
