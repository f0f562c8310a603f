#include "engine/executor.h"
#include "engine/trace.h"

#include <immintrin.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "base/dtype.h"
#include "base/error.h"
#include "base/futex.h"
#include "base/log.h"
#include "base/thread_name.h"

namespace tern {

namespace {

// Payload bytes one program may move per visit.  Alone, an operation moves
// about one ring chunk (TERN_CHUNKSIZE's default) per round, so an operation
// issued meanwhile is admitted, and a caller asking for the drive token gets
// it, within one chunk; with more urgent work admitted it hands the CPU back
// after a small slice, which bounds how long an urgent operation waits for it.
constexpr size_t kBudgetAlone = 512 << 10;
constexpr size_t kBudgetYielding = 16 << 10;
// An async request's waiter drives it only up to this size, and only alone (wait()).
constexpr size_t kWaiterDrivesBytes = 64 << 10;

// Payload bytes that decide whether an operation is small: the same on
// every rank that issued it (descriptor fields only).
uint64_t opBytes(const Operation& op) {
  return op.desc.count * typeSize(static_cast<ternDataType_t>(op.desc.dtype));
}

// Small operations move on their connections' low-latency siblings
// (Conn::small, transport/ll.h).  Every rank decides from its descriptor and
// the limit both ends of the connection agreed on, so both ends of a stream
// pick the same sibling; interleaved kinds (weight streams) keep the fifo,
// whose message boundaries they share with others.
bool mayGoSmall(const Operation& op) { return !op.unordered && !opKind(op.desc.kind).interleaved; }

// Moves a phase's steps onto the small siblings (program.h).
void takeSmallChannels(Operation& op) {
  if (mayGoSmall(op)) takeSmallChannels(op.phase, opBytes(op));
}

}  // namespace

Executor::Executor(EngineHost& host, int rank, double timeoutSec, double holdSec)
    : host_(host),
      rank_(rank),
      timeoutSec_(timeoutSec),
      hold_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(holdSec))),
      pool_(new OpPool) {
  bell_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // -1: the driver's poll just times out
  thread_ = std::thread([this] { loop(); });
}

// The pool goes once the operations still held elsewhere are released (the
// active lists' go with the members, after this).
Executor::~Executor() {
  stop();
  pool_->close();
  if (bell_ >= 0) close(bell_);
}

// Sequentially consistent with idleWait(): the ringer publishes its work
// (pending_, wantLevel_) before it reads polling_, the driver sets polling_
// before it looks for that work, so one of the two always sees the other.
void Executor::ring() {
  if (bell_ < 0 || !polling_.load()) return;
  uint64_t one = 1;
  ssize_t r = write(bell_, &one, sizeof one);
  (void)r;  // a full counter is still a ring
}

OpPtr Executor::newOperation() { return pool_->get(); }

void Executor::submit(const std::vector<OpPtr>& ops, bool wake) {
  for (const OpPtr& op : ops) {
    using W = Operation::Waiter;
    op->waiter = !wake ? W::kDrives : opBytes(*op) > kWaiterDrivesBytes ? W::kSleeps : W::kAsync;
  }
  if (admitForCaller(ops, wake)) return;
  int standing = 0;
  {
    std::lock_guard<std::mutex> lk(m_);
    for (const OpPtr& op : ops) {
      op->stamp = stamp();
      pending_.push_back(op);
      standing += op->standing;
    }
    anyPending_.store(true, std::memory_order_release);
    standing_.fetch_add(standing);
    outstanding_.fetch_add(static_cast<int>(ops.size()) - standing);
  }
  // A blocking caller drives its own operation (see wait()): waking the
  // progress thread for it would cost a futile context switch.
  if (wake || standing > 0) workCv_.notify_all();
  ring();  // a driver asleep in poll() admits it now
}

// A blocking call's operations (one, or a group's: a send and a receive)
// on an idle engine: the caller takes the drive token now and admits them
// straight into the active lists, so neither submit nor the first round
// takes the pending list's lock, and the progress thread is not rung (on
// 2 cores its wake-up and the token's hand-back cost more than a small
// sendrecv itself); wait() finds the token held for the last (heldFor_: the
// caller waits for that one first, api/group.cc's waitAll), drives at
// once, and the others progress in the same rounds.  Only for callers
// that wait right away (`wake` false: group.cc's blocking path).
bool Executor::admitForCaller(const std::vector<OpPtr>& ops, bool wake) {
  if (wake || ops.empty()) return false;
  for (const OpPtr& op : ops)
    if (op->standing) return false;
  if (!drive_.try_lock()) return false;
  admit();  // anything submitted before them goes first (issue order)
  for (const OpPtr& op : ops) admitHeld(op);
  heldFor_.store(ops.back().get(), std::memory_order_relaxed);
  return true;
}

// An operation admitted by the token's holder, straight into its level's list.
void Executor::admitHeld(const OpPtr& op) {
  outstanding_.fetch_add(1);
  op->stamp = stamp();
  enlist(op);
}

// Completions are frequent and usually nobody sleeps on them (the caller
// drives its own operation): notify only when someone does.  A sleeper
// increments doneWaiters_ and then tests its predicate, both while it holds
// m_, and callers change what it tests before they read doneWaiters_, all
// sequentially consistent: either it sees the change, or we see it, and then
// taking m_ waits until it is asleep on doneCv_, so the notification cannot
// slip in between.
void Executor::wakeWaiters() {
  if (doneWaiters_.load() > 0) {
    { std::lock_guard<std::mutex> lk(m_); }
    doneCv_.notify_all();
  }
}

// Runs the rounds while this thread holds the drive token, then lets go;
// false when it handed the token to a more urgent waiter.
bool Executor::driveHeld(const Operation* op) {
  bool finished = driveUntil(op);
  releaseHeld();
  return finished;
}

// Lets go of the drive token; work left over (async requests, other
// threads' calls issued meanwhile) goes on to the progress thread.
void Executor::releaseHeld() {
  drive_.unlock();
  if (outstanding_.load() > 0) {
    workCv_.notify_all();
    wakeWaiters();
  }
}

// Sleeps until `ready` (or `nap`: the token may have come free).
template <class Pred>
void Executor::sleepUntil(Pred ready, std::chrono::milliseconds nap) {
  std::unique_lock<std::mutex> lk(m_);
  ++doneWaiters_;
  doneCv_.wait_for(lk, nap, ready);
  --doneWaiters_;
}

ternResult_t Executor::wait(Operation& op, std::string* error) {
  // seq_cst: sleepUntil's side of the handshake in complete().
  auto done = [&] { return op.done.load(); };
  // submit() took the token for this operation (admitForCaller): drive.
  if (heldFor_.load(std::memory_order_relaxed) == &op) {
    heldFor_.store(nullptr, std::memory_order_relaxed);
    if (!driveHeld(&op)) std::this_thread::yield();  // handed over: let the urgent caller in
  }
  // While other work is in flight, an async request's waiter leaves the
  // driving to the progress thread, whose rounds serve the most urgent level
  // first anyway: waiters that took the token, or asked for it, moved the
  // drive from thread to thread at every completion.  A training step's
  // dozen waiting threads per rank (a PriorityScheduler's per-parameter
  // allreduces) made ~10,000 switches a second per rank that way, and at
  // 4 ranks on 2 cores their CPU and cache churn slowed the compute they
  // shared the cores with (perf/RESULTS.md, 2026-11-29: priorities at 4
  // hosts, which variant is CPU-bound).  A small lone
  // operation (torch's blocking all_reduce is an async request waited at
  // once) is still driven by its waiter, whose latency a wake-up chain
  // through the progress thread would add to; a large one waits on the
  // network, beside which a wake-up is nothing, and sleeps on its own word.
  // A small one sleeps on the shared condition, which every completion
  // notifies, so it finds out when it has become the only one; the nap only
  // bounds a missed notification.
  if (op.waiter == Operation::Waiter::kSleeps) {
    sleepOnDone(op);
    return finishWait(op, error);
  }
  if (op.waiter == Operation::Waiter::kAsync) {
    while (!done() && outstanding_.load() > 1) sleepUntil(done, std::chrono::milliseconds(20));
    if (done()) return finishWait(op, error);
  }
  // Someone else may drive: unless the operation is bulk, stay awake for a
  // while to take the token, since a wake-up on a busy CPU costs more than a
  // small urgent operation.  Once per wait, not after every nap: a waiter on
  // an operation that the network holds for tens of milliseconds (a training
  // step's per-level allreduces, one waiting thread per level) yielded two
  // thirds of the time, and a dozen such threads took a third of the cores
  // that the training's compute needed (perf/RESULTS.md, 2026-11-28:
  // PriorityScheduler, waiters that spun, a benchmark model sized to its compute).
  Clock::time_point spinUntil{};  // read when first needed: a caller that drives reads no clock
  while (!done()) {
    bool got = drive_.try_lock();
    if (!got) {
      // Ask for the token if our work is more urgent than what is driven.
      int want = wantLevel_.load();
      while (op.level < want && !wantLevel_.compare_exchange_weak(want, op.level)) {
      }
      if (op.level < want) ring();
      if (spinUntil == Clock::time_point{}) spinUntil = Clock::now() + std::chrono::milliseconds(2);
      while (op.level < kLevels - 1 && !done() && !(got = drive_.try_lock()) && Clock::now() < spinUntil)
        sched_yield();
    }
    if (got) {
      if (driveHeld(&op)) break;
      std::this_thread::yield();  // handed over: let the urgent caller in
    } else if (!done()) {
      sleepUntil(done);
    }
  }
  return finishWait(op, error);
}

// Sleeps on the operation's own word until complete() sets it: other
// completions do not wake this thread (a shared condition variable woke
// every waiting thread at each one; ~150 switches a second per waiter in a
// PriorityScheduler step; perf/RESULTS.md, 2026-11-29: priorities at 4 hosts,
// which variant is CPU-bound).  The nap bounds a missed wake-up.
void Executor::sleepOnDone(Operation& op) {
  op.sleepers.fetch_add(1);
  while (op.doneWord.load() == 0) futexWait(&op.doneWord, 0, 20 * 1000 * 1000);
  op.sleepers.fetch_sub(1);
}

ternResult_t Executor::finishWait(const Operation& op, std::string* error) {
  if (error) {  // (usually empty: no string copy then)
    if (op.error.empty()) error->clear();
    else *error = op.error;
  }
  return op.result;
}

void Executor::drain() {
  workCv_.notify_all();
  while (outstanding_.load() > 0) {
    if (drive_.try_lock()) driveHeld(nullptr);
    else sleepUntil([&] { return outstanding_.load() == 0; });
  }
}

ternResult_t Executor::hearOwed(const std::vector<Conn*>& conns) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(timeoutSec_));
  // The progress thread may hold the token a while (it listens for
  // standing operations); it lets go between rounds.
  while (!drive_.try_lock()) {
    if (Clock::now() > deadline) return ternSuccess;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ternResult_t r = ternSuccess;
  for (size_t i = 0; i < conns.size() && r == ternSuccess; ++i) r = hearOwedOn(conns[i], deadline);
  drive_.unlock();
  return r;
}

// One connection's owed descriptors, read and checked as they arrive.
ternResult_t Executor::hearOwedOn(Conn* c, Clock::time_point deadline) {
  while (!c->owed.empty()) {
    bool moved = false;
    if (c->needsProgress()) TERN_CHECK(c->progress(&moved));
    OpDesc theirs;
    bool mismatch = false;
    if (peekPast(c, &theirs, &mismatch) && mismatch) return heardError(Heard::kOwedMismatch, c, theirs, theirs);
    if (c->owed.empty()) break;
    if (c->inputEnded() || Clock::now() > deadline) {
      // A peer that failed (a mismatch it saw first) said why; one that
      // left or stalled without answering did not make the same call.
      TERN_CHECK(host_.checkHealth());
      return setError(ternRemoteError, "rank " + std::to_string(c->peer) +
                                           (c->inputEnded() ? " exited without answering"
                                                            : " did not answer, within the timeout,") +
                                           " this rank's " + describe(c->owed.front()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return ternSuccess;
}

void Executor::stop() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
  }
  stopAsked_.store(true);
  workCv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Executor::bindTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return pthread_setaffinity_np(thread_.native_handle(), sizeof set, &set) == 0;
}

bool Executor::idle() { return outstanding_.load() == 0; }

void Executor::loop() {
  setLogRank(rank_);
  nameThisThread("tern-progress");
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(m_);
      workCv_.wait(lk, [&] { return stopping_ || outstanding_.load() > 0 || standing_.load() > 0; });
      // Only a stop ends the thread.  Woken for work that a waiter drove to
      // completion meanwhile, it once took "nothing outstanding, nothing
      // standing" for a stop and left for good; async waiters, which leave
      // the driving to it while others are in flight, then waited forever.
      if (stopping_ && outstanding_.load() == 0) return;
    }
    if (outstanding_.load() == 0) {
      listen();
      continue;
    }
    if (!drive_.try_lock()) {  // a caller drives: look again when it lets go
      std::unique_lock<std::mutex> lk(m_);
      workCv_.wait_for(lk, std::chrono::milliseconds(1));
      continue;
    }
    bool finished = driveUntil(nullptr);
    drive_.unlock();
    if (!finished) {  // handed over: let the urgent caller take the token first
      wakeWaiters();
      std::unique_lock<std::mutex> lk(m_);
      workCv_.wait_for(lk, std::chrono::milliseconds(1));
    }
  }
}

// Only standing operations (weight-stream receivers) are admitted: drive
// them while they move, so what a peer streams is drained without a caller,
// and nap on the work condition while they only listen.  A caller takes the
// token as usual (shouldHandOver); the next round it runs serves them too.
void Executor::listen() {
  bool napping = true;
  if (drive_.try_lock()) {
    unsigned idle = 0;
    napping = false;
    while (outstanding_.load() == 0 && standing_.load() > 0 && !stopAsked_.load() &&
           !shouldHandOver(nullptr)) {
      if (round()) {
        idle = 0;
        lastListenMove_ = Clock::now();
        continue;
      }
      auto now = Clock::now();
      if (now >= nextHealth_) {  // dead peers, abort, a stream blocked on a gone peer
        ternResult_t r = checkIdle(now);
        if (r != ternSuccess) failAll(r, lastThreadError());
        nextHealth_ = now + std::chrono::milliseconds(20);
      }
      // Nothing in flight (no stream to poll): nap outside the token.
      if (++idle >= 64 && !anyPumps()) {
        napping = true;
        break;
      }
      idleWait(idle, nullptr);
    }
    if (shouldHandOver(nullptr)) wantLevel_.store(kLevels);
    drive_.unlock();
    wakeWaiters();
  }
  if (!napping) return;
  // A stream that moved lately is likely to move again soon: short naps
  // (the next chunk is noticed within ~50 us), long ones once it is quiet.
  if (Clock::now() - lastListenMove_ < std::chrono::milliseconds(200)) {
    usleep(50);
    return;
  }
  std::unique_lock<std::mutex> lk(m_);
  workCv_.wait_for(lk, std::chrono::milliseconds(1));
}

// Every connection the active operations wait on has a descriptor to poll
// (and there is at least one).
bool Executor::pumpsPollable() const {
  bool any = false;
  for (auto& list : active_)
    for (const OpPtr& o : list)
      for (const Conn* c : o->pumps) {
        if (c->pollFd() < 0) return false;
        any = true;
      }
  return any;
}

bool Executor::anyPumps() const {
  for (auto& list : active_)
    for (const OpPtr& o : list)
      if (!o->pumps.empty()) return true;
  return false;
}

bool Executor::shouldHandOver(const Operation* op) const {
  return wantLevel_.load(std::memory_order_relaxed) < (op ? op->level : kLevels);
}

bool Executor::driveUntil(const Operation* op) {
  idleRounds_ = 0;
  for (;;) {
    if (op ? op->done.load(std::memory_order_acquire) : outstanding_.load() == 0) return true;
    if (shouldHandOver(op)) {
      wantLevel_.store(kLevels);
      return false;  // the caller releases the token; the urgent waiter takes it
    }
    if (round()) {
      idleRounds_ = 0;
      continue;
    }
    // The clock is read every 64 idle rounds only, and the first check
    // comes 2 ms into a wait: short waits stay free of both.
    if (++idleRounds_ % 64 == 0) {
      auto now = Clock::now();
      if (idleRounds_ == 64) {
        nextHealth_ = now + std::chrono::milliseconds(2);
      } else if (now >= nextHealth_) {
        ternResult_t r = checkIdle(now);
        if (r != ternSuccess) failAll(r, lastThreadError());
        nextHealth_ = now + std::chrono::milliseconds(20);
      }
    }
    idleWait(idleRounds_, op);
  }
}

// Called every round: the lock is taken only when something was submitted.
void Executor::admit() {
  if (!anyPending_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(m_);
  for (OpPtr& op : pending_) enlist(op);
  pending_.clear();
  anyPending_.store(false, std::memory_order_relaxed);
}

// Issue order within a level: see executor.h.
// A receive from any source that has not picked its sender yet stands for
// every peer: later receives wait for it (it may pick their peer).
// Unordered operations (weight streams) neither wait nor are waited for.
bool Executor::runnable(const std::vector<OpPtr>& list, size_t i) const {
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

// Picks the sender of an unbound any-source receive: the first peer (round
// robin from the last one picked) whose stream at this level holds a send
// descriptor, among the peers no earlier receive still waits on.  Every
// earlier operation that read that stream has completed (collectives before
// it have; receives from that peer are excluded), so the next bytes there are
// the start of a new operation: padding to 32, then its descriptor.
ternResult_t Executor::bindSource(const std::vector<OpPtr>& list, size_t i, bool* bound) {
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
      return k && !k->reader && peekDesc(k, &d) && d.kind == opKind(op.desc.kind).peerKind &&
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

// While a more urgent level is busy (it moved less than hold_ ago), less
// urgent ones are held: that level is moving bytes right now and between its
// chunks waits only for the link or the next chunk from its peer, and bytes
// of ours would share that link.  Measured (perf/RESULTS.md, 2026-11-24): at
// 1 Gbit/s a bulk allreduce that filled in whenever the urgent one waited
// took half the link, and the urgent one took 2.1x its solo time; held, 1.05-1.16x.
// Once the urgent level has been quiet for hold_ (it waits on a peer that
// has not issued it yet, say) less urgent work fills in again in small
// slices, so a peer blocked in our bulk operation still gets it done.
bool Executor::round() {
  admit();
  heldFrom_ = kLevels;
  bool urgentWaiting = false;  // a more urgent level has work
  for (auto& list : active_) {
    if (list.empty()) continue;
    if (urgentWaiting && Clock::now() < heldUntil_) {
      heldFrom_ = static_cast<int>(&list - active_);
      return false;
    }
    const size_t budget = urgentWaiting ? kBudgetYielding : kBudgetAlone;
    bool moved = false, pumped = false;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!runnable(list, i)) continue;
      Operation& op = *list[i];
      bool m = false, finished = false;
      ternResult_t r = op.unbound() ? bindSource(list, i, &m) : ternSuccess;
      if (r == ternSuccess && !op.unbound() && !op.draining)
        r = step(op, budget, &m, &pumped, &finished);
      if (r == ternSuccess && (finished || op.draining)) finished = settled(op, &r);
      if (r != ternSuccess) {
        failAll(r, lastThreadError());
        return true;
      }
      if (finished) complete(op, ternSuccess, std::string());
      moved |= m || finished;
    }
    list.erase(std::remove_if(list.begin(), list.end(), [](const OpPtr& o) { return o->done.load(); }),
               list.end());
    if (moved || pumped) {  // serve the most urgent levels again first
      ++busyRounds_;
      if (moved && anyActiveBelow(&list)) heldUntil_ = Clock::now() + hold_;
      return true;
    }
    // A level whose operations only listen (stream receivers) holds nobody back.
    urgentWaiting |= std::any_of(list.begin(), list.end(), [](const OpPtr& o) { return !o->phase.listening; });
  }
  return false;
}

namespace {
// Milliseconds on the coarse monotonic clock (a few ns to read; ticks of a
// few ms, plenty for urgentInUse's ten-second window).
int64_t coarseMs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}
}  // namespace

// When each level last had work (urgentInUse).
void Executor::noteInUse(int level) { lastAdmitMs_[level] = coarseMs(); }

// Into its level's active list (driver only).
void Executor::enlist(const OpPtr& op) {
  noteInUse(op->level);
  active_[op->level].push_back(op);
}

// Whether a level more urgent than `level` is in use: it has work, or had
// some within the last kUrgentRecentMs.  Priorities in training recur every
// iteration (seconds apart for large models), and the bulk bytes an urgent
// message finds ahead of it were queued before it was issued, so the bound
// must already hold then.  A job with one level, or bulk transfers long
// after anything urgent, run unbounded (measured: at 4 ranks on 2 cores and
// 10 Gbit/s the bound cost a bulk allreduce 1.1-1.4x its time;
// perf/RESULTS.md, 2026-11-28).
bool Executor::urgentInUse(int level) const {
  constexpr int64_t kUrgentRecentMs = 10000;
  const int64_t now = coarseMs();
  for (int l = 0; l < level; ++l)
    if (!active_[l].empty() || (lastAdmitMs_[l] && now - lastAdmitMs_[l] < kUrgentRecentMs)) return true;
  return false;
}

bool Executor::anyActiveBelow(const std::vector<OpPtr>* level) const {
  return std::any_of(level + 1, std::end(active_), [](const std::vector<OpPtr>& l) { return !l.empty(); });
}

ternResult_t Executor::beginPhase(Operation& op, bool* finished) {
  for (;;) {
    if (op.phase.reframe) {  // its messages were whole: the next phase greets anew
      if (!op.phase.holdStreams) letGo(op);
      op.greetedIn.clear();
      op.greetedOut.clear();
    }
    resetPhase(op.phase);  // keeps the step storage: no allocation per phase
    bool more = false;
    TERN_CHECK(op.task->next(op.ctx, &op.phase, &more));
    if (!more) {
      *finished = true;
      return ternSuccess;
    }
    bool any = false;
    for (const Program& p : op.phase.progs) any |= !p.steps.empty();
    if (any || op.phase.listening) break;  // else a phase of local work only: go on to the next
  }
  TERN_CHECK(adoptPhase(op));
  op.moves += !op.phase.listening;  // a new phase is progress
  return ternSuccess;
}

// The phase's connections: pumped, or awaited while they open (adopt).
ternResult_t Executor::adoptPhase(Operation& op) {
  op.pumps.clear();
  op.opening.clear();
  Conn* last = nullptr;  // steps mostly use one connection in a row: adopted once
  for (const Program& p : op.phase.progs)
    for (const Step& s : p.steps)
      for (Conn* k : {s.in, s.out}) {
        if (!k || k == last || std::find(op.pumps.begin(), op.pumps.end(), k) != op.pumps.end() ||
            std::find(op.opening.begin(), op.opening.end(), k) != op.opening.end())
          continue;
        last = k;
        TERN_CHECK(adopt(op, k));
      }
  // The low-latency siblings exist (and both ends agreed on their limit)
  // once a connection is open: chosen now, or when the last opening ends.
  if (op.opening.empty()) takeSmallChannels(op);
  return ternSuccess;
}

// A connection the phase uses: pumped if open (and its transport needs it),
// else awaited (its opening runs on the connection table's thread).
// A low-latency sibling (Conn::owner) opens with its connection.
ternResult_t Executor::adopt(Operation& op, Conn* k) {
  bool ready;
  if (k->owner) k = k->owner;
  TERN_CHECK(k->use(&ready));
  if (!ready) op.opening.push_back(k);
  else if (k->needsProgress()) op.pumps.push_back(k);
  return ternSuccess;
}

// The phase's programs run once all its connections are open; an opening
// that fails fails the operation, one that never ends times it out.
ternResult_t Executor::awaitOpen(Operation& op) {
  std::vector<Conn*> waiting;
  waiting.swap(op.opening);
  for (Conn* k : waiting) TERN_CHECK(adopt(op, k));
  op.moves += op.opening.size() < waiting.size();  // a connection opened: progress
  if (op.opening.empty()) takeSmallChannels(op);
  return ternSuccess;
}

// *moved: its steps moved data (or a phase began); *pumped: only its
// connections' progress did something, which for a transport whose progress
// is shared (one UCX worker) may be another operation's traffic.
ternResult_t Executor::step(Operation& op, size_t budget, bool* moved, bool* pumped, bool* finished) {
  if (!op.begun) {
    if (!op.ctx.mem->ready()) return ternSuccess;  // the caller's stream is not there yet
    op.begun = true;
    const Operation::PreMul& pm = op.premul;
    if (pm.count) op.ctx.mem->scale(pm.scaled, pm.src, pm.count, pm.dt, pm.scalar);
    if (!op.collective && !op.send && !op.unordered) op.desc.seq = nextRecvSeq(op);
    if (trace_) trace_->started(op);
    TERN_CHECK(beginPhase(op, finished));
    if (*finished) return ternSuccess;
  }
  if (!op.opening.empty()) {
    TERN_CHECK(awaitOpen(op));
    if (!op.opening.empty()) return ternSuccess;
  }
  // While priorities are in use, a less urgent level keeps what it leaves in
  // the kernel short: bytes queued there (and in the qdisc, and in a shaper's
  // FIFO) go before a more urgent level's next message whatever the engine
  // decides.  Measured (perf/RESULTS.md, 2026-11-27): an urgent allreduce of
  // a few KB waited 77 ms behind 9.6 MB of bulk in a shaper's queue.
  const bool bulk = !op.pumps.empty() && urgentInUse(op.level);
  const bool mixed = bulk || (!op.pumps.empty() && anyActiveBelow(&active_[op.level]));
  for (Conn* k : op.pumps) {
    bool m = false;
    k->bulk = bulk;
    k->mixed = mixed;
    TERN_CHECK(k->progress(&m));
    *pumped |= m;
  }
  bool done = true;
  TERN_CHECK(runPrograms(op, budget, moved, &done));
  op.moves += *moved || *pumped;
  if (!done) return ternSuccess;
  for (Conn* k : op.pumps)  // everything sent has left the process
    if (!k->flushed()) return ternSuccess;
  TERN_CHECK(beginPhase(op, finished));
  *moved = *finished || !op.phase.listening;
  // An unordered operation's next message takes its stream now, before an
  // ordered operation issued after that message was posted gets its turn
  // in this round (see Phase::postedAt).
  if (op.unordered && !*finished && !op.phase.listening && op.opening.empty())
    TERN_CHECK(runPrograms(op, budget, moved, &done));
  return ternSuccess;
}

ternResult_t Executor::runPrograms(Operation& op, size_t budget, bool* moved, bool* done) {
  for (Program& p : op.phase.progs) TERN_CHECK(advance(op, p, op.phase.red, op.ctx.nranks, budget, moved));
  *done = phaseThrough(op.phase, op.desc);
  return ternSuccess;
}

// Whether a finished plan's operation may complete: an asynchronous memory
// type's last work (a final division, a copy after the last receive) must
// have run first; then the caller's stream is released (MemOps::end).  A
// device failure becomes the operation's.
bool Executor::settled(Operation& op, ternResult_t* r) {
  const MemOps& m = *op.ctx.mem;
  if (!m.async()) return true;
  if (!op.draining) {
    op.draining = true;
    op.drainFence = m.fence();
  }
  if (!m.done(op.drainFence)) return false;
  m.end();
  if (m.error() != ternSuccess) *r = setError(m.error(), m.lastError());
  return true;
}

void Executor::complete(Operation& op, ternResult_t r, const std::string& err) {
  op.result = r;
  if (op.ctx.mem) op.ctx.mem->end();  // a failure too: the caller's stream never waits forever
  if (trace_) trace_->completed(op);
  if (!err.empty()) op.error = err;  // empty since the operation was made
  if (r == ternSuccess && !op.standing) host_.onComplete();
  letGo(op);
  // No lock unless someone sleeps (the blocking caller usually drives its
  // own operation): a lock pair less per call (see wakeWaiters()).
  op.done.store(true);
  op.doneWord.store(1);  // seq_cst: sleepOnDone() either sees it or is counted in sleepers
  if (op.sleepers.load() > 0) futexWakeAll(&op.doneWord);
  (op.standing ? standing_ : outstanding_).fetch_sub(1);
  wakeWaiters();
}

// A failure fails the communicator: every admitted operation ends with the
// sentence that says why (the peers hear of it through the closed sockets).
void Executor::failAll(ternResult_t r, const std::string& why) {
  host_.onFailure(r, why);
  admit();
  for (auto& list : active_) {
    for (OpPtr& op : list)
      if (!op->done.load()) complete(*op, r, why);
    list.clear();
  }
}

// Receives are numbered per peer and level when they start (not when issued):
// a receive from any source learns its peer only then, and receives from one
// peer start in issue order.
uint64_t Executor::nextRecvSeq(const Operation& op) { return startRecv(op.level, op.peer, op.ctx.nranks); }

uint64_t Executor::startRecv(int level, int peer, int nranks) {
  std::vector<uint64_t>& seq = recvSeq_[level];
  if (seq.size() < static_cast<size_t>(nranks)) seq.resize(nranks, 0);
  return seq[peer]++;
}

// Called while nothing moves: earlier failures, abort, dead peers, and
// operations that waited longer than TERN_TIMEOUT.
ternResult_t Executor::checkIdle(Clock::time_point now) {
  TERN_CHECK(host_.checkHealth());
  // Checks come only in idle rounds: rounds that moved since the last one
  // (other operations, or more urgent levels this one was held behind) mean
  // nobody was watched meanwhile, so nobody's idle time runs across them.
  // A gap with no round moved is idle time, however long: on a loaded host
  // a thread descheduled for 200 ms between checks once reset every clock,
  // and a 2 s timeout never fired.
  const bool watched = busyRounds_ == busyRoundsSeen_;
  busyRoundsSeen_ = busyRounds_;
  for (auto& list : active_)
    for (size_t i = 0; i < list.size(); ++i) {
      Operation& op = *list[i];
      if ((!op.begun && !op.unbound()) || !runnable(list, i) || op.phase.listening) continue;
      if (op.begun && op.opening.empty()) TERN_CHECK(checkBlockedOnGone(op.phase, rank_, op.phase.what));
      if (op.begun) TERN_CHECK(checkOtherStream(op, op.phase));
      if (op.moves != op.movesSeen || !watched) {  // moved since the last check: idle from now
        op.movesSeen = op.moves;
        op.idleSince = now;
      }
      double waited = std::chrono::duration<double>(now - op.idleSince).count();
      if (waited > timeoutSec_)
        return setError(ternTimeout, "rank " + std::to_string(rank_) + " made no progress in " +
                                         (op.unbound() ? "a receive from any source" : op.phase.what) +
                                         " for " + std::to_string((int)waited) +
                                         " s (TERN_TIMEOUT) waiting on rank(s) " +
                                         (op.unbound() ? "any" : blockedPeers(op.phase)) +
                                         ": dead or stalled peer?");
    }
  return ternSuccess;
}

// Backs off from spinning to yielding to sleeping in poll(), so ranks that
// outnumber cores still get the CPU they need.  `op`: what the driver drives
// for (nullptr: the progress thread); the doorbell ends the sleep when a more
// urgent caller wants the token or new work arrives.
void Executor::idleWait(unsigned& idle, const Operation* op) {
  constexpr unsigned kYield = 4096;
  // Held back by the priority hold, with every connection a socket: the
  // urgent level waits on the network, so spinning or yielding gains
  // nothing the poll's wake-up would not (and at 4 ranks on 2 cores the
  // spins of every hold cost tac ~50 ms of CPU per iteration).
  if (heldFrom_ < kLevels && idle < kYield && pumpsPollable()) idle = kYield;
  if (idle < kSpinPauses) {
    _mm_pause();
    return;
  }
  if (idle < kYield) {
    const uint64_t before = __rdtsc();  // cheaper than the clock: this is the wait's inner loop
    sched_yield();
    // A yield that gave the core away means other threads want it (a
    // training step's compute beside its gradients' transfers, on as many
    // cores as ranks).  Where the wait is on sockets, yielding on gains
    // nothing the kernel's wake-up would not give, and every return to this
    // thread costs them a switch: sleep in poll from now on, until the next
    // move.  A wait on shared memory keeps yielding: it has nothing to sleep
    // on, and a peer rank may be the thread it yields to.
    // 60k cycles: 15-30 us at the clock rates of today's x86 servers.
    if (__rdtsc() - before < 60000 || !pumpsPollable()) return;
    idle = kYield;
  }
  pollfd fds[65];
  int n = 0;
  if (bell_ >= 0) fds[n++] = {bell_, POLLIN, 0};
  bool pollable = true, any = false;
  long recheckNs = 1000000;  // a connection capped at its bulk bound looks again sooner
  // Levels the hold keeps back are not polled: their sockets stay writable
  // while they wait, and a poll that returned at once for them spun the
  // driver through the whole hold (a 4-host training step on 2 cores spent
  // ~20% more CPU per iteration, measured in perf/RESULTS.md, 2026-11-29:
  // priorities at 4 hosts on 2 cores, where the CPU went).
  // The hold's end wakes the poll instead.
  for (int level = 0; level < heldFrom_; ++level)
    for (OpPtr& o : active_[level])
      for (Conn* c : o->pumps) {
        any = true;
        const bool writable = c->wantsWritable();
        if (long ns = c->cappedRecheckNs(); ns > 0) recheckNs = std::min(recheckNs, ns);
        if (c->pollFd() < 0) pollable = false;
        else if (n < 65)
          fds[n++] = {c->pollFd(), static_cast<short>(POLLIN | (writable ? POLLOUT : 0)), 0};
      }
  if (!any || !pollable) {
    usleep(any ? 5 : 50);
    return;
  }
  // A connection holding bytes back at its kernel-queue bound gets no event
  // when the queue drains: look again when it says (at 10 Gbit/s the 256 KiB
  // bound drains in 0.2 ms; a millisecond's sleep left the link idle,
  // measured: a 4-rank bulk allreduce 1.4x slower).  Unstaged sends too (the
  // test once asked whether staged bytes waited, and a capped unstaged step
  // has none).
  timespec wait{0, recheckNs};
  if (heldFrom_ < kLevels) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(heldUntil_ - Clock::now()).count();
    wait.tv_nsec = std::max<long>(0, std::min<long>(wait.tv_nsec, left));
  }
  polling_.store(true);
  if (!anyPending_.load() && !shouldHandOver(op)) ppoll(fds, n, &wait, nullptr);
  polling_.store(false);
  uint64_t rung;
  if (bell_ >= 0 && fds[0].revents) (void)!read(bell_, &rung, sizeof rung);
}

}  // namespace tern
