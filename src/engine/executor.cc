// Executor (executor.h): submit, wait (who drives), drain, and the progress
// thread's loop, over the engine's parts.
#include "engine/executor.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_name.h"
#include "engine/stream_marks.h"

namespace tern {

namespace {
// An async request's waiter drives it only up to this size, and only alone (wait()).
constexpr size_t kWaiterDrivesBytes = 64 << 10;
}  // namespace

Executor::Executor(EngineHost& host, int rank, double timeoutSec, double holdSec)
    : host_(host),
      rank_(rank),
      pool_(new OpPool),
      levels_(rank),
      health_(host, rank, timeoutSec),
      rounds_(holdSec, admission_, levels_, stepper_, health_, waits_, token_) {
  thread_ = std::thread([this] { loop(); });
}

// The pool goes once the operations still held elsewhere are released (the
// active lists' go with the members, after this).
Executor::~Executor() {
  stop();
  pool_->close();
}

OpPtr Executor::newOperation() { return pool_->get(); }

void Executor::submit(const std::vector<OpPtr>& ops, bool wake) {
  for (const OpPtr& op : ops) {
    using W = Operation::Waiter;
    op->waiter = !wake ? W::kDrives : payloadBytes(op->desc) > kWaiterDrivesBytes ? W::kSleeps : W::kAsync;
  }
  if (admitForCaller(ops, wake)) return;
  const int standing = admission_.queue(ops);
  // A blocking caller drives its own operation (see wait()): waking the
  // progress thread for it would cost a futile context switch.
  if (wake || standing > 0) waits_.notifyWork();
  waits_.ring();  // a driver asleep in poll() admits it now
}

// A blocking call's operations (one, or a group's: a send and a receive)
// on an idle engine: the caller takes the drive token now and admits them
// straight into the active lists, so neither submit nor the first round
// takes the pending list's lock, and the progress thread is not rung (on
// 2 cores its wake-up and the token's hand-back cost more than a small
// sendrecv itself); wait() finds the token held for the last (the caller
// waits for that one first, api/group.cc's waitAll), drives at once, and
// the others progress in the same rounds.  Only for callers that wait
// right away (`wake` false: group.cc's blocking path).
bool Executor::admitForCaller(const std::vector<OpPtr>& ops, bool wake) {
  if (wake || ops.empty()) return false;
  int level = kLevels;
  for (const OpPtr& op : ops) {
    if (op->standing) return false;
    level = std::min(level, op->level);
  }
  if (!token_.tryTakeAt(level)) return false;
  token_.served(level);
  stepper_.admit();  // anything submitted before them goes first (issue order)
  for (const OpPtr& op : ops) stepper_.admitHeld(op);
  token_.holdFor(ops.back().get());
  return true;
}

// Runs the rounds while this thread holds the drive token, then lets go;
// false when it handed the token to a more urgent waiter.  With `then` still
// to finish, the token stays held for it: the caller's next wait drives it.
// A group's send whose receiver reads the buffer itself (single copy) ends
// after the receive that the caller waits for first, and handing back woke
// the progress thread to drive it while the caller asked for the token
// back: two context switches per call (perf/RESULTS.md, 2026-12-06: the
// fast phase against 1937317, small messages packed, a group keeps the
// drive token, and what is left short).
bool Executor::driveHeld(const Operation* op, const Operation* then) {
  bool finished = driveUntil(op);
  if (finished && then && !then->done.load()) {
    token_.holdFor(then);
    return true;
  }
  if (finished && op)
    stepper_.handBack(token_, op->level);
  else
    stepper_.releaseToken(token_);
  return finished;
}

ternResult_t Executor::wait(Operation& op, std::string* error, const Operation* then) {
  // submit() took the token for this operation (admitForCaller), or the
  // wait for the one before kept it for this one: drive.
  if (token_.heldFor(&op)) {
    token_.holdFor(nullptr);
    if (!driveHeld(&op, then)) std::this_thread::yield();  // handed over: let the urgent caller in
  }
  if (op.waiter == Operation::Waiter::kSleeps) {
    Waits::sleepOnDone(op);
    return Waits::finishWait(op, error);
  }
  if (op.waiter == Operation::Waiter::kAsync && waitAsync(op)) return Waits::finishWait(op, error);
  Clock::time_point spinUntil{};  // read when first needed: a caller that drives reads no clock
  while (!op.done.load()) {       // seq_cst: sleepUntil's side of the handshake in complete()
    if (driveFor(op, then, &spinUntil)) break;
  }
  token_.served(op.level);  // an ask of ours left pending would hold the others back
  return Waits::finishWait(op, error);
}

// While other work is in flight, an async request's waiter leaves the
// driving to the progress thread, whose rounds serve the most urgent level
// first anyway: waiters that took the token, or asked for it, moved the
// drive from thread to thread at every completion.  A training step's
// dozen waiting threads per rank (a PriorityScheduler's per-parameter
// allreduces) made ~10,000 switches a second per rank that way, and at
// 4 ranks on 2 cores their CPU and cache churn slowed the compute they
// shared the cores with (perf/RESULTS.md, 2026-11-29: priorities at 4
// hosts, which variant is CPU-bound).  A small lone operation (torch's
// blocking all_reduce is an async request waited at once) is still driven
// by its waiter, whose latency a wake-up chain through the progress thread
// would add to; a large one waits on the network, beside which a wake-up is
// nothing, and sleeps on its own word (Waiter::kSleeps).  A small one
// sleeps on the shared condition, which every completion notifies, so it
// finds out when it has become the only one; the nap only bounds a missed
// notification.  True once the operation is done.
bool Executor::waitAsync(Operation& op) {
  auto done = [&] { return op.done.load(); };
  while (!done() && admission_.outstanding() > 1) waits_.sleepUntil(done, std::chrono::milliseconds(20));
  return done();
}

// One turn of a blocking wait: take the token and drive (true once the
// operation is done), or ask for it and sleep.  Someone else may drive:
// unless the operation is bulk, stay awake for a while to take the token,
// since a wake-up on a busy CPU costs more than a small urgent operation.
// Once per wait, not after every nap: a waiter on an operation that the
// network holds for tens of milliseconds (a training step's per-level
// allreduces, one waiting thread per level) yielded two thirds of the time,
// and a dozen such threads took a third of the cores that the training's
// compute needed (perf/RESULTS.md, 2026-11-28: PriorityScheduler, waiters
// that spun, a benchmark model sized to its compute).
bool Executor::driveFor(Operation& op, const Operation* then, Clock::time_point* spinUntil) {
  auto done = [&] { return op.done.load(); };
  bool got = token_.tryTakeAt(op.level);
  if (!got) {
    // Ask for the token if our work is more urgent than what is driven.
    if (token_.ask(op.level)) waits_.ring();
    if (*spinUntil == Clock::time_point{}) *spinUntil = Clock::now() + std::chrono::milliseconds(2);
    while (op.level < kLevels - 1 && !done() && !(got = token_.tryTakeAt(op.level)) &&
           Clock::now() < *spinUntil)
      sched_yield();
  }
  if (got) {
    token_.served(op.level);
    if (driveHeld(&op, then)) return true;
    std::this_thread::yield();  // handed over: let the urgent caller in
  } else if (!done()) {
    waits_.sleepUntil(done);
  }
  return false;
}

void Executor::drain() {
  waits_.notifyWork();
  while (admission_.outstanding() > 0) {
    if (token_.tryTakeAt(kLevels))
      driveHeld(nullptr);
    else waits_.sleepUntil([&] { return admission_.outstanding() == 0; });
  }
}

std::vector<Conn*> Executor::owing(const std::vector<Conn*>& streams) {
  std::vector<Conn*> out;
  for (Conn* c : streams)
    if (const StreamMarks* m = marksIfAny(c); m && !m->owed.empty()) out.push_back(c);
  return out;
}

ternResult_t Executor::hearOwed(const std::vector<Conn*>& conns) {
  const Clock::time_point deadline = health_.deadline();
  // The progress thread may hold the token a while (it listens for
  // standing operations); it lets go between rounds.
  while (!token_.tryTake()) {
    if (Clock::now() > deadline) return ternSuccess;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ternResult_t r = health_.hearOwed(conns, deadline);
  token_.letGo();
  return r;
}

void Executor::stop() {
  {
    std::lock_guard<std::mutex> lk(waits_.lock());
    stopping_.store(true);
  }
  waits_.notifyWork();
  if (thread_.joinable()) thread_.join();
}

bool Executor::bindTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return pthread_setaffinity_np(thread_.native_handle(), sizeof set, &set) == 0;
}

void Executor::loop() {
  setLogRank(rank_);
  nameThisThread("tern-progress");
  for (;;) {
    waits_.awaitWork([&] { return stopping_.load() || admission_.outstanding() > 0 || admission_.standing() > 0; });
    // Only a stop ends the thread.  Woken for work that a waiter drove to
    // completion meanwhile, it once took "nothing outstanding, nothing
    // standing" for a stop and left for good; async waiters, which leave
    // the driving to it while others are in flight, then waited forever.
    if (stopping_.load() && admission_.outstanding() == 0) return;
    if (admission_.outstanding() == 0) {
      listen();
      continue;
    }
    if (!token_.tryTakeAt(kLevels)) {  // a caller drives or asked: look again when it has let go
      waits_.napForWork(std::chrono::milliseconds(1));
      continue;
    }
    bool finished = driveUntil(nullptr);
    token_.letGo();
    if (!finished) {  // handed over: let the urgent caller take the token first
      waits_.wakeWaiters();
      waits_.napForWork(std::chrono::milliseconds(1));
    }
  }
}

// Only standing operations (weight-stream receivers) are admitted: drive
// them while they move, so what a peer streams is drained without a caller,
// and nap on the work condition while they only listen.  A caller takes the
// token as usual (DriveToken::wanted); the next round it runs serves them too.
void Executor::listen() {
  bool napping = true;
  if (token_.tryTake()) {
    napping = listenRounds();
    token_.letGo();
    waits_.wakeWaiters();
  }
  if (!napping) return;
  // A stream that moved lately is likely to move again soon: short naps
  // (the next chunk is noticed within ~50 us), long ones once it is quiet.
  if (Clock::now() - lastListenMove_ < std::chrono::milliseconds(200)) {
    usleep(50);
    return;
  }
  waits_.napForWork(std::chrono::milliseconds(1));
}

// The rounds while only standing operations are admitted (the token held):
// true when they stopped to nap (nothing in flight to poll).
bool Executor::listenRounds() {
  unsigned idle = 0;
  while (admission_.outstanding() == 0 && admission_.standing() > 0 && !stopping_.load() &&
         !token_.wanted(nullptr)) {
    if (rounds_.round()) {
      idle = 0;
      lastListenMove_ = Clock::now();
      continue;
    }
    failOn(health_.whenDue(levels_, Clock::now()));  // dead peers, abort, a stream blocked on a gone peer
    // Nothing in flight (no stream to poll): nap outside the token.
    if (++idle >= 64 && !levels_.anyPumps()) return true;
    rounds_.idleWait(idle, nullptr);
  }
  return false;
}

void Executor::failOn(ternResult_t r) {
  if (r != ternSuccess) stepper_.failAll(r, lastThreadError());
}

bool Executor::driveUntil(const Operation* op) {
  idleRounds_ = 0;
  for (;;) {
    if (op ? op->done.load(std::memory_order_acquire) : admission_.outstanding() == 0) return true;
    if (token_.wanted(op)) {
      return false;  // the caller releases the token; the urgent waiter takes it
    }
    if (rounds_.round()) {
      idleRounds_ = 0;
      continue;
    }
    failOn(health_.afterIdleRounds(++idleRounds_, levels_));
    rounds_.idleWait(idleRounds_, op);
  }
}

}  // namespace tern
