// One executor per communicator advances every admitted operation together,
// chunk by chunk, and after every round serves the most urgent ready work
// first: levels are visited from 0 (most urgent) to 7, and a level whose
// operations moved ends the round, so less urgent levels get the CPU only
// while the urgent ones wait on their peers.  A 4 MiB urgent allreduce issued
// behind a 256 MiB bulk one therefore overtakes it at the next chunk.
// Less urgent levels also stay off the links while a more urgent level is
// busy (it moved within TERN_PRIORITY_HOLD_US): see round().
//
// Order within a level (what makes per-level matching across ranks work):
// each level has its own connections (streams), and on them a collective
// starts only after every earlier operation of its level has completed; a
// send or receive starts after the earlier collectives of its level and the
// earlier transfers in the same direction with the same peer.  Sends and
// receives otherwise progress concurrently, so matched pairs never deadlock.
//
// Who drives: whichever thread holds the drive token.  A blocking call on an
// idle communicator takes it and runs the rounds itself (no thread hand-off:
// small-message latency); otherwise the executor's progress thread drives
// and waiters sleep until their operation completes.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/spin_lock.h"
#include "engine/operation.h"

namespace tern {

class Trace;

// The streams a call on the small path greeted without an operation (its
// descriptor went first on them): handed to the operation if it must go to
// the engine.  Left uninitialised: only the first nIn / nOut are read.
struct AloneGreetings {
  static constexpr size_t kMax = 64;
  const Conn* in[kMax];
  const Conn* out[kMax];
  size_t nIn = 0, nOut = 0;
};

// What the executor needs from its communicator (and nothing more).
class EngineHost {
 public:
  virtual ~EngineHost() = default;
  // Abort, an earlier failure (its code and sentence), peers' liveness.
  virtual ternResult_t checkHealth() = 0;
  // An operation failed: the communicator is failed from now on, peers are
  // told (sockets shut), `why` is the sentence every later call repeats.
  virtual void onFailure(ternResult_t r, const std::string& why) = 0;
  virtual void onComplete() = 0;  // statistics (called by the drive token's holder only)
};

constexpr int kLevels = TERN_PRIORITY_LEVELS;
// Pauses a waiting thread spins before it starts yielding (Executor::idleWait,
// the small path's wait): a peer on another core answers within them; one
// that shares our core runs once we yield.
constexpr unsigned kSpinPauses = 64;

class Executor {
 public:
  Executor(EngineHost& host, int rank, double timeoutSec, double holdSec);
  ~Executor();

  // Admits operations in issue order.  `wake`: nobody will wait on them
  // right away (async requests, groups over several communicators), so the
  // progress thread must drive them.
  void submit(const std::vector<OpPtr>& ops, bool wake);
  // Waits for `op`, driving progress on this thread while nobody else does.
  // Returns its result; *error gets its sentence.
  ternResult_t wait(Operation& op, std::string* error);
  // Drives every admitted operation to completion (or failure).
  void drain();
  // Stops the progress thread (after drain).
  void stop();
  bool bindTo(const std::vector<int>& cpus);
  // A new operation for this communicator, from its pool of spare ones
  // (operation.h: a blocking call allocates nothing for it).
  OpPtr newOperation();
  // The next issue stamp: operations get one when submitted; an unordered
  // one's task takes one when the caller posts its message (Phase::postedAt).
  uint64_t stamp() { return stamps_.fetch_add(1) + 1; }
  bool idle();
  void wakeWaiters();
  // TERN_TRACE (engine/trace.h): operations' begin and completion go there.
  void setTrace(Trace* t) { trace_ = t; }

  // The small path (engine/small_path.cc): a blocking caller's operations
  // (one, or a group's transfers on distinct streams) on an idle engine,
  // run on the caller's thread without rounds.  claimIdle takes the drive
  // token if nothing is admitted, pending or standing (the caller numbers
  // its operations while it holds it, so nothing issued later can go
  // first); runAlone then carries them out: true when all are complete (the
  // token let go), false when the unfinished ones were handed to the engine
  // as they stand (a late peer, a stream it cannot take whole, a descriptor
  // to check): the caller's waitAll drives them from there.
  bool claimIdle();
  bool runAlone(const std::vector<OpPtr>& ops);
  // The same for a schedule of steps without a plan (the recursive-doubling
  // allreduce's: api/alone.cc), each (connection, direction) used once, so
  // every message carries the descriptor: returns n once all are done (the
  // token let go, the operation counted), else the step the engine must
  // take over from (token still held): handOverAt then plans `op` (in
  // place: its plan repeats no local work) and starts it at that step.
  // *whole: how many of the steps were found to go whole before (kept by the
  // caller with them); raised as more are.
  size_t runStepsAlone(const OpDesc& desc, const Step* steps, size_t n, const Reduction& red,
                       int nranks, const MemOps& mem, size_t* whole);
  void handOverAt(const OpPtr& op, size_t done);
  // The same for a planned phase run without an operation (api/alone.cc:
  // a plan that does no local work, planPure): true once it is done (token
  // let go, counted); false when the engine must take over (token still
  // held): handOverPhase then plans `op` again and starts each program at
  // the step `ran` reached.
  bool runPhaseAlone(const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks, AloneGreetings& g);
  void handOverPhase(const OpPtr& op, const Phase& ran, const AloneGreetings& g);
  // Hears what `conns` still owe (Conn::owed) before they close (ternComm::
  // hearOwed): ternInvalidUsage for a mismatch, ternRemoteError when a live
  // peer has not sent them within the timeout.
  ternResult_t hearOwed(const std::vector<Conn*>& conns);
  // The same for a group's sends and receives without operations
  // (api/alone.cc, transfersAlone): each step one transfer with its own
  // descriptor, all progressing together.  True once all are done (token
  // let go, each counted); false when the engine must take over (token
  // still held): done[i] says which finished, and the caller hands the
  // others over as operations (handOverAt at step 0).
  // *whole: the steps were found to go whole before (kept by the caller
  // with them, as Phase::whole); set once they are.
  bool runTransfersAlone(const OpDesc* descs, const Step* steps, size_t n, int nranks, const MemOps& mem,
                         bool* whole, bool* done);
  // The sequence number of the next receive from `peer` at `level` (they
  // are numbered when they start: the token's holder only).
  uint64_t startRecv(int level, int peer, int nranks);
  // Operations the small path completed, and those it handed to the engine.
  uint64_t smallPathDone() const { return aloneDone_.load(std::memory_order_relaxed); }
  uint64_t smallPathHanded() const { return aloneHanded_.load(std::memory_order_relaxed); }

 private:
  bool admitForCaller(const std::vector<OpPtr>& ops, bool wake);
  void admitHeld(const OpPtr& op);
  void releaseHeld();
  ternResult_t hearOwedOn(Conn* c, Clock::time_point deadline);
  void handOver(const OpPtr& op, const char* why);
  ternResult_t replan(Operation& op, bool (*same)(const Phase& planned, const void* ran), const void* ran);
  void settleHandOver(const OpPtr& op, ternResult_t r);
  void finishAlone();
  // runPhaseAlone's rounds with the way its greetings are kept (small_path.cc).
  template <class Book>
  bool runWholePhase(Book& book, const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks);
  enum class Next { kRun, kEngine, kFinished };
  Next nextAlonePhase(Operation& op);
  void loop();
  bool driveUntil(const Operation* op);   // false: it handed the token over
  bool shouldHandOver(const Operation* op) const;
  void listen();
  bool anyPumps() const;
  bool pumpsPollable() const;
  bool round();
  bool anyActiveBelow(const std::vector<OpPtr>* level) const;
  void enlist(const OpPtr& op);
  void noteInUse(int level);
  bool urgentInUse(int level) const;
  void admit();
  bool runnable(const std::vector<OpPtr>& list, size_t i) const;
  ternResult_t bindSource(const std::vector<OpPtr>& list, size_t i, bool* bound);
  uint64_t nextRecvSeq(const Operation& op);
  ternResult_t step(Operation& op, size_t budget, bool* moved, bool* pumped, bool* finished);
  ternResult_t runPrograms(Operation& op, size_t budget, bool* moved, bool* done);
  ternResult_t beginPhase(Operation& op, bool* finished);
  ternResult_t adoptPhase(Operation& op);
  ternResult_t adopt(Operation& op, Conn* k);
  ternResult_t awaitOpen(Operation& op);
  bool settled(Operation& op, ternResult_t* r);
  void complete(Operation& op, ternResult_t r, const std::string& err);
  void failAll(ternResult_t r, const std::string& why);
  ternResult_t checkIdle(Clock::time_point now);
  void idleWait(unsigned& idle, const Operation* op);
  void ring();
  bool driveHeld(const Operation* op);
  template <class Pred>
  void sleepUntil(Pred ready, std::chrono::milliseconds nap = std::chrono::milliseconds(1));
  static ternResult_t finishWait(const Operation& op, std::string* error);
  static void sleepOnDone(Operation& op);

  EngineHost& host_;
  const int rank_;
  const double timeoutSec_;
  const Clock::duration hold_;  // see round()
  OpPool* const pool_;  // closed (not deleted) by ~Executor: OpPtrs may outlive it

  std::mutex m_;                      // pending_, stopping_; sleepers on doneCv_ (see complete())
  std::condition_variable workCv_;    // the progress thread: work for it, token released
  std::condition_variable doneCv_;    // waiters: an operation completed, token released
  std::atomic<int> doneWaiters_{0};   // threads asleep on doneCv_ (spares futile wake-ups)
  std::vector<OpPtr> pending_;
  std::atomic<bool> anyPending_{false};  // pending_ non-empty: admit() skips the lock otherwise
  std::atomic<int> outstanding_{0};   // submitted and not completed (standing ones aside)
  std::atomic<int> standing_{0};
  std::atomic<uint64_t> stamps_{0};   // stamp()      // standing operations admitted (Operation::standing)
  std::atomic<bool> stopAsked_{false};  // stop(): the listening loop ends
  bool stopping_ = false;

  SpinLock drive_;                    // the drive token (only ever tried: try_lock)
  // The most urgent level a waiting caller wants to drive for (kLevels: none).
  // The driver hands the token over at the next round when it drives for
  // less urgent work (the progress thread drives for none): the urgent
  // caller's thread then runs the rounds itself, so its operation does not
  // wait for a wake-up on a busy CPU.
  std::atomic<int> wantLevel_{kLevels};
  // The operation whose blocking caller took the token in submit() and
  // drives it in wait() (admitForCaller); written by the token's holder.
  std::atomic<const Operation*> heldFor_{nullptr};
  // The driver's doorbell: while it sleeps in poll() waiting on its peers
  // (polling_), a new operation or a caller asking for the token rings it,
  // so neither waits out the poll's millisecond.
  int bell_ = -1;
  std::atomic<bool> polling_{false};
  std::vector<OpPtr> active_[kLevels];  // driver only
  unsigned idleRounds_ = 0;
  std::vector<uint64_t> recvSeq_[kLevels];  // receives started, per level and peer
  int lastSource_ = 0;                      // where the next any-source pick starts
  Clock::time_point nextHealth_{};
  uint64_t busyRounds_ = 0;      // rounds that moved something (round())
  uint64_t busyRoundsSeen_ = 0;  // busyRounds_ at checkIdle's last look
  Clock::time_point heldUntil_{};  // less urgent levels wait until then (round())
  // The first level the last round held back (kLevels: none held); idleWait
  // leaves that level and the ones below it out of its poll until heldUntil_.
  int heldFrom_ = kLevels;
  int64_t lastAdmitMs_[kLevels] = {};  // when each level last admitted work (coarse ms; urgentInUse)
  Clock::time_point lastListenMove_{};  // listen(): when a standing operation last moved
  std::thread thread_;
  Trace* trace_ = nullptr;
  std::atomic<uint64_t> aloneDone_{0}, aloneHanded_{0};  // the token's holder writes
};

}  // namespace tern
