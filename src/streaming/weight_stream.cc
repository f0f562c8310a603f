#include "streaming/weight_stream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/env.h"
#include "base/error.h"
#include "streaming/stream_tasks.h"

namespace tern {

namespace {

// Bytes per chunk: other operations at the stream's level wait for at most
// one chunk on the stream to the peer, and a version's chunks pipeline.
size_t chunkBytes() {
  static const size_t n = static_cast<size_t>(std::max<long long>(envInt("TERN_STREAM_CHUNK", 1 << 20), 4096));
  return n;
}

// Bytes of the stream's that may sit in the kernel (socket queue, qdisc, in
// flight) before its next chunk waits: what a more urgent level that starts
// to move finds ahead of it on the link, beyond the level hold's reach.
size_t queuedMax() {
  static const size_t n = static_cast<size_t>(std::max<long long>(envInt("TERN_STREAM_QUEUED", 64 << 10), 0));
  return n;
}

void admit(Comm& c, const OpPtr& op) {
  std::vector<OpPtr> one{op};
  c.issue(one, true);  // nobody waits on it: the progress thread drives it
}

std::string streamName(const StreamState& s) {
  return "weight stream " + std::to_string(s.id) + " (rank " + std::to_string(s.sender) + " to rank " +
         std::to_string(s.isSender() ? s.peer : s.rank) + ")";
}

// What a finished operation of the stream says (its sentence to the caller).
ternResult_t opResult(const Operation& op) {
  if (op.result == ternSuccess) return ternSuccess;
  return setError(op.result, op.error);
}

}  // namespace

StreamShape streamShape(int ntensors, const size_t* counts, const ternDataType_t* types) {
  StreamShape sh;
  for (int i = 0; i < ntensors; ++i) {
    sh.total = (sh.total + 63) & ~size_t(63);  // each tensor cache-line aligned
    sh.offset.push_back(sh.total);
    sh.bytes.push_back(counts[i] * ternTypeSize(types[i]));
    sh.total += sh.bytes.back();
  }
  return sh;
}

std::shared_ptr<StreamState> streamStart(Comm& c, int id, int peer, int sender, int level,
                                         const StreamShape& shape) {
  auto s = std::make_shared<StreamState>();
  s->id = id;
  s->rank = c.rank;
  s->peer = peer;
  s->sender = sender;
  s->level = level;
  s->shape = shape;
  s->chunkBytes = chunkBytes();
  s->queuedMax = queuedMax();
  if (s->isSender()) {
    for (auto& b : s->send.bufs) b.assign(shape.total, 0);
    for (auto& n : s->send.snapped) n.store(0);
    return s;
  }
  for (auto& b : s->recv.bufs) b.assign(shape.total, 0);
  s->recv.op = makeStreamOp(*c.engine, s, c.rank);
  admit(c, s->recv.op);
  return s;
}

namespace {

// Copies bytes [lo, hi) of the stream's flat layout out of the caller's
// tensors into dst (the padding between tensors is left as it is).
void copyRange(const StreamShape& sh, const void* const* tensors, char* dst, size_t lo, size_t hi) {
  for (size_t i = 0; i < sh.bytes.size(); ++i) {
    const size_t a = std::max(lo, sh.offset[i]), b = std::min(hi, sh.offset[i] + sh.bytes[i]);
    if (a < b) memcpy(dst + a, static_cast<const char*>(tensors[i]) + (a - sh.offset[i]), b - a);
  }
}

}  // namespace

ternResult_t streamPush(Comm& c, const std::shared_ptr<StreamState>& s,
                        const void* const* tensors, long long version) {
  SendSide& ss = s->send;
  std::lock_guard<std::mutex> one(ss.pushMu);
  OpPtr start;
  int buf;
  {
    std::lock_guard<std::mutex> lk(ss.mu);
    if (ss.closing)
      return setError(ternInvalidUsage, "ternWeightStreamPush: " + streamName(*s) + " is closing");
    if (version <= ss.lastPushed)
      return setError(ternInvalidArgument,
                      "ternWeightStreamPush: version " + std::to_string(version) +
                          " is not newer than the last one pushed (" + std::to_string(ss.lastPushed) +
                          "): versions must increase");
    buf = ss.moving ^ 1;  // the pending buffer (the task moves the other)
    ss.snapped[buf].store(0, std::memory_order_relaxed);  // the task reads it only once it took it (under mu)
    if (ss.pendingVersion < 0) ss.pendingStamp = c.engine->stamp();  // else it keeps the superseded one's
    ss.pendingVersion = ss.lastPushed = version;
    if (!ss.opActive) {
      ss.opActive = true;
      ss.op = start = makeStreamOp(*c.engine, s, c.rank);
    }
  }
  if (start) admit(c, start);
  // The snapshot, chunk by chunk: the first chunks move while the rest are
  // copied (the task never sends past `snapped`).
  char* dst = ss.bufs[buf].data();
  for (size_t lo = 0; lo < s->shape.total; lo += s->chunkBytes) {
    const size_t hi = std::min(s->shape.total, lo + s->chunkBytes);
    copyRange(s->shape, tensors, dst, lo, hi);
    ss.snapped[buf].store(hi, std::memory_order_release);
  }
  return ternSuccess;
}

namespace {

// Takes the ready version if it is newer than the one last copied out, and
// copies that out if it is newer than *version.  `block`: wait for another
// thread's copy instead of returning (poll never blocks; wait may).
void copyNewest(StreamState& s, void* const* tensors, long long* version, bool block) {
  RecvSide& rs = s.recv;
  std::unique_lock<std::mutex> reading(rs.readMu, std::defer_lock);
  if (block) reading.lock();
  else if (!reading.try_lock()) return;
  {
    std::lock_guard<std::mutex> lk(rs.mu);
    if (rs.readyVersion > rs.readVersion) {
      std::swap(rs.ready, rs.read);
      rs.readVersion = rs.readyVersion;
      rs.readyVersion = -1;
    }
  }
  if (rs.readVersion < 0 || rs.readVersion <= *version) return;
  const char* src = rs.bufs[rs.read].data();
  for (size_t i = 0; i < s.shape.bytes.size(); ++i)
    memcpy(tensors[i], src + s.shape.offset[i], s.shape.bytes[i]);
  *version = rs.readVersion;
}

}  // namespace

void streamPoll(StreamState& s, void* const* tensors, long long* version) {
  copyNewest(s, tensors, version, false);
}

ternResult_t streamWait(StreamState& s, void* const* tensors, long long minVersion,
                        long long* version, double timeoutSec) {
  RecvSide& rs = s.recv;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutSec));
  auto arrived = [&] { return std::max(rs.readyVersion, rs.readVersion) >= minVersion; };
  for (;;) {
    bool got;
    {
      std::unique_lock<std::mutex> lk(rs.mu);
      // Short slices: a failed communicator completes the receiver without a notification.
      got = rs.arrived.wait_until(lk, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)),
                                  arrived);
    }
    if (got) {
      long long v = std::min(*version, minVersion - 1);
      copyNewest(s, tensors, &v, true);
      if (v >= minVersion) {
        *version = v;
        return ternSuccess;
      }
      continue;  // another thread took the buffer meanwhile: it is still the newest
    }
    if (rs.op->done.load()) {
      TERN_CHECK(opResult(*rs.op));
      return setError(ternInvalidUsage, "ternWeightStreamWait: " + streamName(s) +
                                            " was closed by its sender before version " +
                                            std::to_string(minVersion) + " arrived");
    }
    if (Clock::now() >= deadline) {
      long long newest;
      {
        std::lock_guard<std::mutex> lk(rs.mu);
        newest = std::max(rs.readyVersion, rs.readVersion);
      }
      return setError(ternTimeout, "ternWeightStreamWait: rank " + std::to_string(s.rank) + " waited " +
                                       std::to_string(static_cast<int>(timeoutSec)) +
                                       " s (TERN_TIMEOUT) for version " + std::to_string(minVersion) +
                                       " of " + streamName(s) + "; the newest arrived is " +
                                       std::to_string(newest));
    }
  }
}

ternResult_t streamClose(Comm& c, const std::shared_ptr<StreamState>& s, double timeoutSec) {
  if (s->isSender()) {
    SendSide& ss = s->send;
    OpPtr op, start;
    {
      std::lock_guard<std::mutex> lk(ss.mu);
      ss.closing = true;
      ss.closeStamp = c.engine->stamp();
      if (!ss.opActive) {
        ss.opActive = true;
        ss.op = start = makeStreamOp(*c.engine, s, c.rank);
      }
      op = ss.op;
    }
    if (start) admit(c, start);
    std::string err;
    // Bounded by the executor's stall timeout (TERN_TIMEOUT without progress).
    ternResult_t r = c.engine->wait(*op, &err);
    return r == ternSuccess ? r : setError(r, err);
  }
  RecvSide& rs = s->recv;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutSec));
  while (!rs.op->done.load()) {
    if (Clock::now() >= deadline) {
      rs.abandoned.store(true);  // stop draining: nobody will read it any more
      return setError(ternTimeout, "ternWeightStreamClose: rank " + std::to_string(s->rank) +
                                       " waited " + std::to_string(static_cast<int>(timeoutSec)) +
                                       " s (TERN_TIMEOUT) for the sender (rank " +
                                       std::to_string(s->peer) + ") to close " + streamName(*s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return opResult(*rs.op);
}

}  // namespace tern
