// The weight-stream entries of the C API: argument checks with a sentence,
// the open handshake with the peer, then streaming/ does the work.
#include <chrono>
#include <cstring>
#include <thread>
#include <mutex>
#include <unordered_set>

#include "api/group.h"
#include "base/error.h"
#include "streaming/weight_stream.h"

struct ternWeightStream {
  ternComm* comm;
  std::shared_ptr<tern::StreamState> state;
};

using namespace tern;

namespace {

std::mutex liveMu;
std::unordered_set<const ternWeightStream*> live;  // streams not closed yet

// What each end of an open says; both must say the same.
struct OpenRecord {
  uint32_t magic;
  int32_t id, sender, ntensors, priority, pad;
  uint64_t total, layout;  // bytes; a hash of the counts and types
};
constexpr uint32_t kOpenMagic = 0x4e525453;  // "STRN"
static_assert(sizeof(ternDataType_t) == sizeof(int), "checkOpen reads a type as an int");

uint64_t layoutHash(int n, const size_t* counts, const ternDataType_t* types) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over (count, type) pairs
  for (int i = 0; i < n; ++i)
    for (uint64_t v : {static_cast<uint64_t>(counts[i]), static_cast<uint64_t>(types[i])}) {
      h ^= v;
      h *= 1099511628211ull;
    }
  return h;
}

std::string describeOpen(const OpenRecord& r) {
  return "weight stream " + std::to_string(r.id) + " from rank " + std::to_string(r.sender) + " of " +
         std::to_string(r.ntensors) + " tensors (" + std::to_string(r.total) +
         " bytes) at priority level " + std::to_string(r.priority);
}

ternResult_t bad(ternComm* c, const std::string& msg) {
  return setError(ternInvalidArgument, "ternWeightStreamOpen: " + msg);
}

ternResult_t checkOpen(const InCall& call, ternComm* c, int peer, int sender, int n, const size_t* counts,
                       const ternDataType_t* types, int priority, ternWeightStream_t* ws) {
  if (!ws) return bad(c, "ws is NULL");
  *ws = nullptr;
  TERN_CHECK(checkLiveComm(call, c));
  if (peer < 0 || peer >= c->nranks)
    return bad(c, "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(c->nranks) + ")");
  if (peer == c->rank)
    return bad(c, "peer " + std::to_string(peer) + " is this rank: a stream to oneself is not supported");
  if (sender != c->rank && sender != peer)
    return bad(c, "sender " + std::to_string(sender) + " must be this rank (" + std::to_string(c->rank) +
                      ") or the peer (" + std::to_string(peer) + ")");
  if (n < 1) return bad(c, "ntensors is " + std::to_string(n) + "; a stream carries at least one tensor");
  if (!counts || !types) return bad(c, std::string(counts ? "types" : "counts") + " is NULL");
  for (int i = 0; i < n; ++i) {
    int type;  // read as an int: a value outside the enum must not be loaded as one
    memcpy(&type, &types[i], sizeof type);
    if (type < 0 || type >= ternNumTypes)
      return bad(c, "types[" + std::to_string(i) + "] = " + std::to_string(type) +
                        " is not a ternDataType_t");
    if (counts[i] == 0 || counts[i] > (size_t(1) << 40))
      return bad(c, "counts[" + std::to_string(i) + "] = " + std::to_string(counts[i]) +
                        " is not in [1, 2^40]");
  }
  if (priority < 0 || priority >= TERN_PRIORITY_LEVELS)
    return bad(c, "priority " + std::to_string(priority) + " is not in [0, " +
                      std::to_string(TERN_PRIORITY_LEVELS) + ") (0 = most urgent, 7 = bulk)");
  if (groupOpen()) return setError(ternInvalidUsage, "ternWeightStreamOpen cannot be called inside a group");
  return ternSuccess;
}

// Both ends trade their records at the stream's level (a send/recv pair in a
// group), so a stream whose ends disagree fails on both with one sentence
// and the communicator stays usable.
ternResult_t handshake(ternComm* c, int peer, const OpenRecord& mine) {
  OpenRecord theirs{};
  int saved = TERN_PRIORITY_DEFAULT;
  ternGetPriority(&saved);
  ternSetPriority(mine.priority);
  ternGroupStart();
  ternSend(&mine, sizeof mine, ternUint8, peer, c, nullptr);
  ternRecv(&theirs, sizeof theirs, ternUint8, peer, c, nullptr);
  ternResult_t r = ternGroupEnd();
  ternSetPriority(saved);
  // A nonblocking communicator returns at once: the records are needed now.
  while (r == ternInProgress) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    ternCommGetAsyncError(c, &r);  // bounded: a stalled peer fails the comm after TERN_TIMEOUT
  }
  TERN_CHECK(r);
  OpenRecord expect = mine;
  if (theirs.magic == kOpenMagic && memcmp(&theirs, &expect, sizeof expect) == 0) return ternSuccess;
  return setError(ternInvalidUsage, "ternWeightStreamOpen: rank " + std::to_string(peer) + " opened " +
                                        describeOpen(theirs) + " but rank " + std::to_string(c->rank) +
                                        " opened " + describeOpen(mine) +
                                        ": both ends must open their streams in the same order with the same "
                                        "arguments");
}

// The stream, if it is live (not closed) and this end may make the call;
// else the sentence.  Its communicator is the caller's to enter and check.
ternResult_t liveStream(ternWeightStream_t ws, const char* what, bool sender) {
  {
    std::lock_guard<std::mutex> lk(liveMu);
    if (!ws || !live.count(ws))
      return setError(ws ? ternInvalidUsage : ternInvalidArgument,
                      std::string(what) + ": ws is " + (ws ? "not an open stream (closed already?)" : "NULL"));
  }
  if (ws->state->isSender() != sender)
    return setError(ternInvalidUsage, std::string(what) + ": rank " + std::to_string(ws->state->rank) +
                                          " is the " + (sender ? "receiver" : "sender") +
                                          " of weight stream " + std::to_string(ws->state->id) +
                                          "; only the " + (sender ? "sender" : "receiver") + " may call it");
  return ternSuccess;
}

ternResult_t checkTensors(ternWeightStream_t ws, const void* const* tensors, const char* what) {
  if (!tensors) return setError(ternInvalidArgument, std::string(what) + ": tensors is NULL");
  for (size_t i = 0; i < ws->state->shape.bytes.size(); ++i)
    if (!tensors[i])
      return setError(ternInvalidArgument,
                      std::string(what) + ": tensors[" + std::to_string(i) + "] is NULL");
  return ternSuccess;
}

// A failure of the stream's own calls is recorded on the communicator too.
ternResult_t recorded(ternWeightStream_t ws, ternResult_t r) {
  return r == ternSuccess ? r : setError(r, lastThreadError());
}

}  // namespace

extern "C" {

ternResult_t ternWeightStreamOpen(ternComm_t comm, int peer, int sender, int ntensors,
                                  const size_t* counts, const ternDataType_t* types, int priority,
                                  ternWeightStream_t* ws) {
  InCall call(comm);
  TERN_CHECK(checkOpen(call, comm, peer, sender, ntensors, counts, types, priority, ws));
  StreamShape shape = streamShape(ntensors, counts, types);
  OpenRecord mine{kOpenMagic, 0, sender, ntensors, priority, 0, shape.total,
                  layoutHash(ntensors, counts, types)};
  {
    std::lock_guard<std::mutex> lk(comm->streamsMu);
    mine.id = comm->streamsOpened[peer]++;
  }
  TERN_CHECK(handshake(comm, peer, mine));
  auto* s = new ternWeightStream{comm, streamStart(*comm, mine.id, peer, sender, priority, shape)};
  {
    std::lock_guard<std::mutex> lk(liveMu);
    live.insert(s);
  }
  *ws = s;
  return ternSuccess;
}

ternResult_t ternWeightStreamPush(ternWeightStream_t ws, const void* const* tensors, long long version) {
  const char* what = "ternWeightStreamPush";
  TERN_CHECK(liveStream(ws, what, true));
  InCall call(ws->comm);
  TERN_CHECK(checkLiveComm(call, ws->comm));
  TERN_CHECK(checkTensors(ws, tensors, what));
  if (version < 0)
    return setError(ternInvalidArgument,
                    std::string(what) + ": version " + std::to_string(version) + " is negative");
  return recorded(ws, streamPush(*ws->comm, ws->state, tensors, version));
}

ternResult_t ternWeightStreamPoll(ternWeightStream_t ws, void* const* tensors, long long* version) {
  const char* what = "ternWeightStreamPoll";
  TERN_CHECK(liveStream(ws, what, false));
  InCall call(ws->comm);
  TERN_CHECK(checkLiveComm(call, ws->comm));
  TERN_CHECK(checkTensors(ws, tensors, what));
  if (!version) return setError(ternInvalidArgument, std::string(what) + ": version is NULL");
  streamPoll(*ws->state, tensors, version);
  // A failed stream (dead sender) says so; what arrived before stays readable.
  const Operation& op = *ws->state->recv.op;
  if (op.done.load() && op.result != ternSuccess) return setError(op.result, op.error);
  return ternSuccess;
}

ternResult_t ternWeightStreamWait(ternWeightStream_t ws, void* const* tensors, long long minVersion,
                                  long long* version) {
  const char* what = "ternWeightStreamWait";
  TERN_CHECK(liveStream(ws, what, false));
  InCall call(ws->comm);
  TERN_CHECK(checkLiveComm(call, ws->comm));
  TERN_CHECK(checkTensors(ws, tensors, what));
  if (!version) return setError(ternInvalidArgument, std::string(what) + ": version is NULL");
  return recorded(ws, streamWait(*ws->state, tensors, minVersion, version, ws->comm->cfg.timeoutSec));
}

ternResult_t ternWeightStreamClose(ternWeightStream_t ws) {
  {
    std::lock_guard<std::mutex> lk(liveMu);
    if (!ws || !live.erase(ws))
      return setError(ws ? ternInvalidUsage : ternInvalidArgument,
                      std::string("ternWeightStreamClose: ws is ") +
                          (ws ? "not an open stream (closed already?)" : "NULL"));
  }
  std::unique_ptr<ternWeightStream> owned(ws);  // released whatever Close returns
  InCall call(ws->comm);
  TERN_CHECK(checkLiveComm(call, ws->comm));
  return recorded(ws, streamClose(*ws->comm, ws->state, ws->comm->cfg.timeoutSec));
}

}  // extern "C"
