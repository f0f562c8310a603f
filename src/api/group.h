// Groups, priorities and requests of the API layer.
//
// ternGroupStart/End: operations issued between them are collected per
// thread and issued together at the outermost ternGroupEnd, each to its
// communicator's executor in call order, so send/recv pairs progress together
// and cannot deadlock.  ternGroupEndAsync returns a request instead of
// waiting.  The priority level of an operation is the calling thread's at the
// time of the call (ternSetPriority).
#pragma once
#include <utility>
#include <vector>

#include "collectives/collectives.h"
#include "comm/comm.h"
#include "comm/operations.h"
#include "engine/operation.h"

struct ternRequest {
  std::vector<std::pair<ternComm*, tern::OpPtr>> ops;
};

namespace tern {

bool groupOpen();
int currentPriority();
// Outside a group (false inside one); *level: the thread's priority.  One
// thread-local look-up for both (the API's, before it asks the small path).
bool soloCall(int* level);
// Inside a group, records a small send or receive instead of making its
// operation (comm/inline_calls.h, P2pCall): true when recorded (*r: ternSuccess).
// Outside a group: false.  An operation added to the group after them
// (launchOp) first turns the recorded ones into operations, in call order.
bool recordInGroup(Comm* c, const CollArgs& a, ternResult_t* r);
// Adds the operation to the calling thread's open group, or issues it and
// waits for it: its result (ternInProgress at once on a nonblocking
// communicator).
ternResult_t launchOp(Comm* c, OpPtr op);
// A call that failed while a group is open fails the group: the outermost
// ternGroupEnd returns the first such failure and issues nothing (NCCL's
// ncclGroupError).  Otherwise a rank whose call was refused ran the rest of
// its group as if whole, and a group left empty gave a request that ended
// "without error" (test_engine's DeadPeer at 3 ranks, when the peer's death
// was known before the call).
[[gnu::noinline, gnu::cold]] void failGroup(ternResult_t r);
// A launching call's result (api.cc), its failure noted for the open group.
inline ternResult_t groupResult(ternResult_t r) {
  if (__builtin_expect(r != ternSuccess && r != ternInProgress, 0)) failGroup(r);
  return r;
}
// A thread inside a call on a communicator (comm_api.cc, with the registry):
// ternCommDestroy and ternCommAbort free it only after every such thread has
// left, so a watchdog thread's abort never frees what a caller blocked in a
// collective still uses.  enterComm is false once the comm is unregistered.
bool enterComm(Comm* c);
void leaveComm(Comm* c);
// The same for a thread's one call at a time (a blocking collective, a
// group's recorded transfers at its end): through the thread's call slot
// when it is free, one store in and one out, where enterComm takes the
// registry's lock and a locked add each way (comm_api.cc, with why it is safe);
// else through enterComm.  `entered` is false when the comm is not live.
struct CallSlot;
class InCall {
 public:
  explicit InCall(Comm* c);
  ~InCall() { leave(); }
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;
  void leave();
  bool entered = false;

 private:
  Comm* c_;
  CallSlot* slot_ = nullptr;
};
// Why a communicator cannot be used (checkLiveComm found it so), recorded.
[[gnu::noinline, gnu::cold]] ternResult_t commRefused(const InCall& call, Comm* c);
// Every call's first check, inline: a live, healthy communicator that
// `call` has entered (made first thing in every API function: from then on
// ternCommAbort on another thread waits for the call to return before it
// frees anything, so the checks' reads of the communicator cannot meet a
// freed one); the sentences are commRefused's.
inline ternResult_t checkLiveComm(const InCall& call, Comm* c) {
  if (__builtin_expect(call.entered && c->asyncError.load() == ternSuccess, 1)) return ternSuccess;
  return commRefused(call, c);
}
// A request that is never waited on is released by ternCommDestroy of any
// communicator it has operations on (after they completed).
void releaseRequestsOf(const Comm* c);

}  // namespace tern
