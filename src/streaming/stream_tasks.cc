// The weight stream's operation kind and its two tasks.  Both run on the
// executor's thread as unordered operations (engine/operation.h): every
// chunk is a whole message with its own descriptor (a reframing phase), so
// it slips in between other operations' messages on the level's stream to
// the peer and never splits one.
#include "streaming/stream_tasks.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "base/log.h"
#include "engine/descriptors.h"
#include "engine/stream_marks.h"

namespace tern {

namespace {

std::string describeChunk(const OpDesc& d) {
  std::string s = "weight stream " + std::to_string(d.root);
  if (d.dtype & kCloseAck) s = "close acknowledgement of " + s;
  else if (d.dtype & kChunkClose) s = "close of " + s;
  else s += " chunk of " + std::to_string(d.count) + " bytes of version " + std::to_string(d.seq);
  return s + " at priority level " + std::to_string(d.level);
}

OpKindInfo makeKind() {
  OpKindInfo k;
  k.id = kWeightStreamKind;
  k.name = "weight stream";
  k.match = OpKindInfo::kRoot;  // the stream id; chunk size, version and flags vary
  k.interleaved = true;
  k.describe = describeChunk;
  return k;
}

const OpKindInfo kKind = makeKind();
const bool registered = registerOpKind(kKind);

// Looks at the head of the stream from the peer: *mine is set when the
// message there is this stream's (its descriptor in *d).  An error when the
// peer has gone and nothing is left to read.
ternResult_t peekMine(const StreamState& s, Conn* c, OpDesc* d, bool* mine) {
  *mine = false;
  bool ready;
  TERN_CHECK(c->use(&ready));
  if (!ready) return ternSuccess;  // still opening: nothing there yet
  if (c->needsProgress()) {
    bool moved = false;
    TERN_CHECK(c->progress(&moved));
  }
  const char* p;
  const bool unread = !beingRead(c);
  if (unread && peekDesc(c, d)) {
    *mine = d->kind == kWeightStreamKind && static_cast<int>(d->root) == s.id;
  } else if (unread && c->inputEnded() && c->recvAvail(&p) == 0) {
    return setError(ternRemoteError, "rank " + std::to_string(s.rank) + ": rank " + std::to_string(s.peer) +
                                         (s.isSender() ? ", the receiver" : ", the sender") +
                                         " of weight stream " + std::to_string(s.id) +
                                         ", exited or failed before closing it");
  }
  return ternSuccess;
}

// One chunk of a version, through the fifo, never single copy (both ends
// alike): the sender's progress thread copies the next chunk in while the
// receiver copies this one out, two cores at once, where a single-copy read
// leaves the sender idle: over shm single copy moved a stream at 0.7-0.8x
// and one-way sends at 0.5-0.65x the fifo's rate (perf/RESULTS.md,
// 2026-11-28: weight streams keep the fifo on one host).
Step chunkStep(Conn* in, Conn* out, const char* src, char* dst, size_t bytes) { return Step{in, out, src, dst, bytes}; }

// A zero-byte message (its descriptor alone) in or out on `c`.
void descriptorOnly(Phase* ph, Conn* c, bool out) {
  ph->reframe = true;
  ph->progs.resize(1);
  Step s;
  (out ? s.out : s.in) = c;
  ph->progs[0].steps.push_back(s);
}

// Sender: moves the version in bufs[moving] chunk by chunk; between
// versions swaps in the newest pushed one; sends the close marker when
// asked; ends when it has nothing left (the next push admits a new one).
class SendTask final : public Task {
 public:
  SendTask(std::shared_ptr<StreamState> s, OpDesc* d) : s_(std::move(s)), desc_(d) {}

  ternResult_t next(const PlanCtx& x, Phase* ph, bool* more) override {
    *more = true;
    ph->what = "weight stream";
    SendSide& ss = s_->send;
    if (ss.movingVersion >= 0 && off_ < s_->shape.total) return chunk(x, ph);
    std::unique_lock<std::mutex> lk(ss.mu, std::try_to_lock);
    if (!lk) {  // a push is claiming the pending buffer: ask again next round
      ph->listening = true;
      return ternSuccess;
    }
    if (ss.pendingVersion >= 0) {
      ss.moving ^= 1;
      ss.movingVersion = ss.pendingVersion;
      ss.movingStamp = ss.pendingStamp;
      ss.pendingVersion = -1;
      off_ = 0;
      return chunk(x, ph);
    }
    ss.movingVersion = -1;
    if (ss.closing && !ss.closeSent) {
      ss.closeSent = true;
      return closeMarker(x, ph);
    }
    if (ss.closeSent && !acked_) return awaitAck(x, ph, &lk);
    ss.opActive = false;  // the next push admits a new operation
    *more = false;
    return ternSuccess;
  }

 private:
  // *go when the chunk ending at `end` may be posted: its bytes are in the
  // snapshot and the kernel holds no more than queuedMax of the stream's.
  // Listening, the engine sees no stall: a peer that stopped reading for
  // TERN_TIMEOUT is an error here.
  ternResult_t mayPost(const PlanCtx& x, size_t end, bool* go) {
    *go = false;
    if (s_->send.snapped[s_->send.moving].load(std::memory_order_acquire) < end) return ternSuccess;
    const size_t max = s_->queuedMax;
    Conn* c = x.conn(s_->peer);
    if (max == 0 || c->kernelQueued() <= max) {
      blocked_ = false;
      *go = true;
      return ternSuccess;
    }
    if (!blocked_) blockedSince_ = Clock::now();
    blocked_ = true;
    if (std::chrono::duration<double>(Clock::now() - blockedSince_).count() > x.cfg->timeoutSec)
      return setError(ternTimeout, "rank " + std::to_string(s_->peer) + " read nothing of weight stream " +
                                       std::to_string(s_->id) + " from rank " + std::to_string(s_->rank) +
                                       " within TERN_TIMEOUT");
    return ternSuccess;
  }

  ternResult_t chunk(const PlanCtx& x, Phase* ph) {
    const size_t total = s_->shape.total, n = std::min(s_->chunkBytes, total - off_);
    // The push may still be copying this part of its snapshot, or the link
    // still carries enough of the stream: ask again.
    bool go;
    TERN_CHECK(mayPost(x, off_ + n, &go));
    if (!go) {  // the chunk was posted: what is issued after it waits for it
      Conn* c = x.conn(s_->peer);
      uint64_t& reserved = marks(c).reservedAt;
      reserved = std::min(reserved, s_->send.movingStamp);
      ph->listening = true;
      return ternSuccess;
    }
    desc_->count = n;
    desc_->seq = static_cast<uint64_t>(s_->send.movingVersion);
    desc_->dtype = off_ + n == total ? kChunkLast : 0;
    ph->reframe = true;
    // The stream to the peer stays ours until the version's last chunk: an
    // ordered operation that took it in between could be one the receiver
    // joins only after this version arrived (push; barrier / wait; barrier).
    ph->holdStreams = off_ + n < total;
    ph->postedAt = s_->send.movingStamp;
    ph->progs.resize(1);
    const char* src = s_->send.bufs[s_->send.moving].data() + off_;
    ph->progs[0].add(chunkStep(nullptr, x.conn(s_->peer), src, nullptr, n));
    off_ += n;
    return ternSuccess;
  }

  ternResult_t closeMarker(const PlanCtx& x, Phase* ph) {
    desc_->count = 0;
    desc_->dtype = kChunkClose;
    descriptorOnly(ph, x.conn(s_->peer), true);
    ph->postedAt = s_->send.closeStamp;
    waitSince_ = Clock::now();
    return ternSuccess;
  }

  // Close returns once the receiver has everything (its engine acknowledges
  // the marker by itself), so a sender that exits right after cannot cut off
  // what is still on the way; at most TERN_TIMEOUT.
  ternResult_t awaitAck(const PlanCtx& x, Phase* ph, std::unique_lock<std::mutex>* lk) {
    lk->unlock();
    OpDesc d;
    bool mine = false;
    TERN_CHECK(peekMine(*s_, x.conn(s_->peer), &d, &mine));
    if (mine && (d.dtype & kCloseAck)) {
      acked_ = true;
      descriptorOnly(ph, x.conn(s_->peer), false);
      return ternSuccess;
    }
    if (std::chrono::duration<double>(Clock::now() - waitSince_).count() > x.cfg->timeoutSec)
      return setError(ternTimeout, "rank " + std::to_string(s_->rank) + " closed weight stream " +
                                       std::to_string(s_->id) + " but rank " + std::to_string(s_->peer) +
                                       " did not acknowledge it within TERN_TIMEOUT");
    ph->listening = true;
    return ternSuccess;
  }

  std::shared_ptr<StreamState> s_;
  OpDesc* desc_;    // its operation's: each chunk's descriptor says what it is
  size_t off_ = 0;  // bytes of the moving version sent
  bool acked_ = false;
  Clock::time_point waitSince_{};
  bool blocked_ = false;  // mayPost has waited on the kernel's queue since blockedSince_
  Clock::time_point blockedSince_{};
};

// Receiver (standing): whenever the stream to the sender is between
// messages and the one at its head is this stream's, reads it into the
// fill buffer; a version's last chunk makes it the ready one.  Anything else
// at the head belongs to another reader (a collective, another stream).
class RecvTask final : public Task {
 public:
  RecvTask(std::shared_ptr<StreamState> s, OpDesc* d) : s_(std::move(s)), desc_(d) {}

  ternResult_t next(const PlanCtx& x, Phase* ph, bool* more) override {
    *more = true;
    ph->what = "weight stream";
    if (landed_) publish();
    if (acked_ || s_->recv.abandoned.load()) {
      *more = false;
      return ternSuccess;
    }
    Conn* c = x.conn(s_->peer);
    if (closed_) {  // the marker arrived: tell the sender, whose Close waits for it
      acked_ = true;
      desc_->count = 0;
      desc_->dtype = kCloseAck;
      descriptorOnly(ph, c, true);
      return ternSuccess;
    }
    OpDesc d;
    bool mine = false;
    TERN_CHECK(peekMine(*s_, c, &d, &mine));
    if (mine && !(d.dtype & kCloseAck)) return take(x, ph, c, d);
    ph->listening = true;
    return ternSuccess;
  }

 private:
  ternResult_t take(const PlanCtx& x, Phase* ph, Conn* c, const OpDesc& d) {
    TERN_LOG(Trace, "takes %s", describe(d).c_str());
    desc_->count = d.count;
    desc_->seq = d.seq;
    desc_->dtype = d.dtype;
    if (d.dtype & kChunkClose) {
      closed_ = true;
      descriptorOnly(ph, c, false);  // reads the marker's descriptor
      return ternSuccess;
    }
    ph->reframe = true;
    ph->progs.resize(1);
    const long long v = static_cast<long long>(d.seq);
    const size_t total = s_->shape.total;
    if (v != fillVersion_ && off_ != 0)
      return malformed(d, "began before version " + std::to_string(fillVersion_) + " was complete");
    fillVersion_ = v;
    const bool last = off_ + d.count == total;
    if (d.count == 0 || off_ + d.count > total || last != ((d.dtype & kChunkLast) != 0))
      return malformed(d, "does not fit the stream's " + std::to_string(total) + " bytes at offset " +
                              std::to_string(off_));
    char* dst = s_->recv.bufs[s_->recv.fill].data() + off_;
    ph->progs[0].add(chunkStep(c, nullptr, nullptr, dst, d.count));
    (void)x;
    off_ += d.count;
    landed_ = last;
    return ternSuccess;
  }

  ternResult_t malformed(const OpDesc& d, const std::string& why) {
    return setError(ternRemoteError, "rank " + std::to_string(s_->rank) + " received " + describe(d) +
                                         " from rank " + std::to_string(s_->peer) + " that " + why +
                                         ": the stream is out of step");
  }

  // The version in the fill buffer is complete: it becomes the ready one
  // (a ready one nobody polled is superseded; its buffer is filled next).
  void publish() {
    RecvSide& rs = s_->recv;
    {
      std::lock_guard<std::mutex> lk(rs.mu);
      std::swap(rs.fill, rs.ready);
      rs.readyVersion = fillVersion_;
    }
    rs.arrived.notify_all();
    TERN_LOG(Trace, "weight stream %d: version %lld arrived", s_->id, fillVersion_);
    off_ = 0;
    landed_ = false;
  }

  std::shared_ptr<StreamState> s_;
  OpDesc* desc_;
  long long fillVersion_ = -1;
  size_t off_ = 0;       // bytes of fillVersion_ received
  bool landed_ = false;  // the last phase completed fillVersion_
  bool closed_ = false;  // the sender's close marker was read
  bool acked_ = false;   // and acknowledged
};

}  // namespace

const OpKindInfo& weightStreamKind() {
  (void)registered;
  return kKind;
}

OpPtr makeStreamOp(Executor& engine, const std::shared_ptr<StreamState>& s, int rank) {
  OpPtr op = engine.newOperation();
  op->level = s->level;
  op->collective = false;
  op->unordered = true;
  op->standing = !s->isSender();  // the receiver drains whatever arrives, while open
  OpDesc& d = op->desc;
  d.magic = kDescMagic;
  d.kind = weightStreamKind().id;
  d.level = static_cast<uint8_t>(s->level);
  d.root = s->id;
  d.rank = rank;
  if (s->isSender()) op->task = std::make_unique<SendTask>(s, &d);
  else op->task = std::make_unique<RecvTask>(s, &d);
  return op;
}

}  // namespace tern
