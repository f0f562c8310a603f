#include "api/group.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_set>

#include "comm/inline_calls.h"
#include "base/error.h"

namespace tern {

namespace {

// What the API keeps per thread, in one object: in a shared library every
// use of a thread_local is a call (__tls_get_addr, plus its initialisation
// check), so a blocking call looks this up once or twice instead of a dozen
// times (~3% of an 8-byte allreduce's profile).
struct PerThread {
  int depth = 0;                         // ternGroupStart nesting
  int priority = TERN_PRIORITY_DEFAULT;  // ternSetPriority
  IssuedOps pending;                     // the open group's operations
  // Scratch lists that keep their capacity: a small blocking call
  // allocates nothing here (latency).
  IssuedOps one;
  std::vector<Comm*> comms;
  std::vector<OpPtr> mine;
  // The open group's sends and receives recorded instead of made
  // (recordInGroup), all on `recordedOn`; only while `pending` is empty, so
  // call order is kept.  `recordLost`: their communicator went away before
  // they could be made.
  std::vector<P2pCall> recorded;
  Comm* recordedOn = nullptr;
  bool recordLost = false;
  // The open group's first failed call (failGroup): its code and sentence.
  ternResult_t failed = ternSuccess;
  std::string failedWhy;
};
thread_local PerThread perThread;

// Not inlined: GCC looks the thread_local up again after every call and
// store; a caller that keeps the reference looks it up once.
__attribute__((noinline)) PerThread& self() { return perThread; }

std::mutex requestsMu;
std::unordered_set<ternRequest*> requests;  // live ones

// Every communicator's operations in call order; `wake` when the caller will
// not drive them itself (several communicators progress at once, each on its
// own thread, so a group spanning them cannot deadlock on their mutual
// dependencies).
void issueAll(PerThread& t, const IssuedOps& ops, bool wake) {
  std::vector<Comm*>& comms = t.comms;
  std::vector<OpPtr>& mine = t.mine;
  comms.clear();
  for (auto& [c, op] : ops)
    if (std::find(comms.begin(), comms.end(), c) == comms.end()) comms.push_back(c);
  wake |= comms.size() > 1;
  for (Comm* c : comms) {
    mine.clear();
    for (auto& [k, op] : ops)
      if (k == c) mine.push_back(op);
    c->issue(mine, wake);
  }
  mine.clear();  // the executor holds them now
}

// The small path (ternComm::issueAlone) for a blocking call or a group on
// one communicator; false when it does not apply (nothing was issued).
bool runAloneIfIdle(PerThread& t, const IssuedOps& ops) {
  Comm* c = ops.empty() ? nullptr : ops[0].first;
  std::vector<OpPtr>& mine = t.mine;
  mine.clear();
  bool taken = c != nullptr;
  for (auto& [k, op] : ops) {
    taken &= k == c;
    mine.push_back(op);
  }
  taken = taken && c->issueAlone(mine);
  mine.clear();
  return taken;
}

// The recorded calls made into operations, in call order, onto `into`.
void makeRecorded(PerThread& t, IssuedOps& into) {
  Comm* c = t.recordedOn;
  if (!enterComm(c)) {
    t.recordLost = true;
  } else {
    for (const P2pCall& call : t.recorded) into.emplace_back(c, recordedOp(c, call));
    leaveComm(c);
  }
  t.recorded.clear();
}

const char* const kGoneBeforeEnd =
    "ternGroupEnd: a communicator of the group was destroyed or aborted before the group ended; "
    "its operations were not issued";

// The recorded calls as transfers on the small path; false when it does not
// apply (nothing done).
bool runRecorded(PerThread& t, ternResult_t* r) {
  Comm* c = t.recordedOn;
  InCall call(c);
  if (!call.entered) {
    t.recorded.clear();
    *r = setError(ternInvalidUsage, kGoneBeforeEnd);
    return true;
  }
  const bool ran = transfersInline(c, t.recorded.data(), t.recorded.size(), r);
  call.leave();
  if (ran) t.recorded.clear();
  return ran;
}

bool liveRequest(ternRequest* r) {
  std::lock_guard<std::mutex> lk(requestsMu);
  return requests.count(r) != 0;
}

// Removes the request from the live set; false if it was not there (another
// thread released it, or it never existed).
bool takeRequest(ternRequest* r) {
  std::lock_guard<std::mutex> lk(requestsMu);
  return requests.erase(r) != 0;
}

}  // namespace

bool groupOpen() { return self().depth > 0; }
int currentPriority() { return self().priority; }
bool soloCall(int* level) {
  const PerThread& t = self();
  *level = t.priority;
  return t.depth == 0;
}

namespace {

// Issues the operations and waits for every one; the first failure's code
// (ternInProgress at once on a nonblocking communicator).
ternResult_t runBlocking(PerThread& t, const IssuedOps& ops) {
  // A nonblocking communicator (ternConfig_t.blocking = 0) returns at once:
  // ternCommGetAsyncError says ternInProgress until its operations are done.
  bool nonblocking = std::any_of(ops.begin(), ops.end(), [](const auto& o) { return !o.first->cfg.blocking; });
  // Device buffers on a stream: the call only enqueues (as NCCL's), so
  // nobody waits for those here; the progress thread drives them.
  bool onStream = std::any_of(ops.begin(), ops.end(), [](const auto& o) { return o.second->streamMem != nullptr; });
  // Whether they run inline is the engine's decision (runsInline: blocking
  // host-memory work only), asked through ternComm::issueAlone.
  if (runAloneIfIdle(t, ops)) return waitAll(ops);
  issueAll(t, ops, nonblocking || onStream);
  if (nonblocking) return ternInProgress;
  return onStream ? waitAll(ops, true) : waitAll(ops);
}

// The group's operations on streams begin now, at its end (checks.cc's
// streamOps left them unbegun): every one follows its stream's earlier work
// before any holds its stream, so none waits for another's hold (a send
// and a recv on one stream that only the peer's matching pair completes).
// A failure issues nothing: the operations let go of their streams as they
// are freed.
ternResult_t beginStreams(const IssuedOps& ops) {
  for (auto& [c, op] : ops)
    if (op->streamMem) op->streamMem->follow();
  for (auto& [c, op] : ops)
    if (op->streamMem) op->streamMem->hold();
  for (auto& [c, op] : ops)
    if (op->streamMem && op->streamMem->error() != ternSuccess)
      return setError(op->streamMem->error(), std::string("ternGroupEnd: ") + op->streamMem->lastError());
  return ternSuccess;
}

}  // namespace

bool recordInGroup(Comm* c, const CollArgs& a, ternResult_t* r) {
  PerThread& t = self();
  if (t.depth == 0) return false;
  if (t.pending.empty() && (t.recorded.empty() || t.recordedOn == c) && t.recorded.size() < kMaxTransfers &&
      mayRecord(c, a)) {
    t.recordedOn = c;
    t.recorded.push_back({a, t.priority});
    *r = ternSuccess;
    return true;
  }
  return false;
}

ternResult_t launchOp(Comm* c, OpPtr op) {
  PerThread& t = self();
  if (t.depth > 0) {
    if (!t.recorded.empty()) makeRecorded(t, t.pending);  // what was recorded goes first
    t.pending.emplace_back(c, std::move(op));
    return ternSuccess;
  }
  // Emptied before returning, so the operation goes back to the pool now.
  t.one.emplace_back(c, std::move(op));
  ternResult_t r = runBlocking(t, t.one);
  t.one.clear();
  return r;
}

void failGroup(ternResult_t r) {
  PerThread& t = self();
  if (t.depth == 0 || t.failed != ternSuccess) return;
  t.failed = r;
  t.failedWhy = lastThreadError();
}

void releaseRequestsOf(const Comm* c) {
  std::vector<ternRequest*> mine;
  {
    std::lock_guard<std::mutex> lk(requestsMu);
    for (ternRequest* r : requests)
      for (auto& [k, op] : r->ops)
        if (k == c) {
          mine.push_back(r);
          break;
        }
    for (ternRequest* r : mine) requests.erase(r);
  }
  for (ternRequest* r : mine) {
    waitAll(r->ops);  // the others' operations too: nothing may still point at its buffers
    delete r;
  }
}

}  // namespace tern

using namespace tern;

extern "C" ternResult_t ternGroupStart(void) {
  ++self().depth;
  return ternSuccess;
}

// The group of a failed call ends with its failure; nothing in it is issued
// (operations on streams let go of them as they are freed).
static ternResult_t dropGroup(PerThread& t) {
  t.pending.clear();
  t.recorded.clear();
  t.recordLost = false;
  const ternResult_t r = t.failed;
  t.failed = ternSuccess;
  return setError(r, "ternGroupEnd: a call in the group failed, so nothing in the group was issued: " +
                         std::move(t.failedWhy));
}

static ternResult_t groupEnd(ternRequest_t* request) {
  PerThread& t = self();
  int& depth = t.depth;
  if (depth == 0)
    return setError(ternInvalidUsage, "ternGroupEnd without a matching ternGroupStart");
  if (--depth > 0) {
    if (request) {
      ++depth;
      return setError(ternInvalidUsage,
                      "ternGroupEndAsync must close the outermost group (it is nested)");
    }
    return ternSuccess;
  }
  if (t.failed != ternSuccess) return dropGroup(t);
  IssuedOps ops;
  ops.swap(t.pending);
  if (!t.recorded.empty()) {  // (then nothing is pending: see recordInGroup)
    ternResult_t r;
    if (!request && runRecorded(t, &r)) return r;
    makeRecorded(t, ops);
  }
  if (t.recordLost) {
    t.recordLost = false;
    return setError(ternInvalidUsage, kGoneBeforeEnd);
  }
  if (ops.empty() && !request) return ternSuccess;
  // Every communicator of the group stays allocated until we are done.
  std::vector<Comm*> entered;
  for (auto& [c, op] : ops) {
    if (std::find(entered.begin(), entered.end(), c) != entered.end()) continue;
    if (!enterComm(c)) {
      for (Comm* e : entered) leaveComm(e);
      return setError(ternInvalidUsage, kGoneBeforeEnd);
    }
    entered.push_back(c);
  }
  struct Leave {
    std::vector<Comm*>& comms;
    ~Leave() {
      for (Comm* e : comms) leaveComm(e);
    }
  } leave{entered};
  TERN_CHECK(beginStreams(ops));
  if (!request) return runBlocking(t, ops);
  issueAll(t, ops, true);
  auto* r = new ternRequest{std::move(ops)};
  {
    std::lock_guard<std::mutex> lk(requestsMu);
    requests.insert(r);
  }
  *request = r;
  return ternSuccess;
}

extern "C" ternResult_t ternGroupEnd(void) { return groupEnd(nullptr); }

extern "C" ternResult_t ternGroupEndAsync(ternRequest_t* request) {
  if (!request) return setError(ternInvalidArgument, "ternGroupEndAsync: request is NULL");
  *request = nullptr;
  return groupEnd(request);
}

extern "C" ternResult_t ternRequestTest(ternRequest_t request, int* done) {
  if (!done) return setError(ternInvalidArgument, "ternRequestTest: done is NULL");
  *done = 0;
  if (!request || !liveRequest(request))
    return setError(ternInvalidUsage,
                    "ternRequestTest: not a live request (NULL, already completed and released, "
                    "or released by ternCommDestroy)");
  for (auto& [c, op] : request->ops)
    if (!op->done.load(std::memory_order_acquire)) return ternSuccess;
  if (!takeRequest(request)) return ternSuccess;  // another thread released it meanwhile
  *done = 1;
  ternResult_t r = waitAll(request->ops);
  delete request;
  return r;
}

extern "C" ternResult_t ternRequestWait(ternRequest_t request) {
  if (!request || !takeRequest(request))
    return setError(ternInvalidUsage,
                    "ternRequestWait: not a live request (NULL, already completed and released, "
                    "or released by ternCommDestroy)");
  ternResult_t r = waitAll(request->ops);
  delete request;
  return r;
}

extern "C" ternResult_t ternSetPriority(int level) {
  if (level < 0 || level >= TERN_PRIORITY_LEVELS)
    return setError(ternInvalidArgument, "ternSetPriority: level " + std::to_string(level) +
                                             " is not in [0, " +
                                             std::to_string(TERN_PRIORITY_LEVELS) +
                                             ") (0 = most urgent, 7 = bulk)");
  self().priority = level;
  return ternSuccess;
}

extern "C" ternResult_t ternGetPriority(int* level) {
  if (!level) return setError(ternInvalidArgument, "ternGetPriority: priority is NULL");
  *level = self().priority;
  return ternSuccess;
}
