// An Operation is data: what was asked (kind, buffers, count, datatype, op,
// root/peer, priority level), how it is carried out (a Task that plans it
// phase by phase as Programs of Steps), how far it got, and how it ended
// (result and sentence).  The API builds one and hands it to its
// communicator's executor, which owns its progress until it completes; a
// request or a blocking caller waits on it.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "engine/op_desc.h"
#include "base/socket.h"
#include "engine/program.h"

namespace tern {

// What an operation kind is to the engine.  The engine lists no kinds: each
// is defined beside its task (collectives/kinds.cc, streaming/) and
// registered when the library loads, and the descriptor carries its id.  The
// kind says what a peer's copy of the descriptor must agree on, which kind
// that copy carries (a receive meets a send) and how the kind is named.
struct OpKindInfo {
  // Descriptor fields a peer's copy must match (kind, level and magic always do).
  enum Match : uint8_t { kCount = 1, kDtype = 2, kRedop = 4, kRoot = 8, kSeq = 16 };
  // How describe() names the descriptor's root field.
  enum Root : uint8_t { kNoRoot, kWithRoot, kToRank, kFromRank };
  uint8_t id = 0;
  const char* name = "unknown operation";
  uint8_t match = kCount | kDtype | kSeq;
  uint8_t peerKind = 0;        // the kind of the peer's descriptor (0: this one)
  bool rootIsMe = false;       // the peer's descriptor names this rank as its root
  Root root = kNoRoot;
  bool showCount = true;       // "of 1024 float32"
  // Its messages are framed one by one (each with its descriptor) and may
  // come between other operations' on a stream: an operation of another
  // kind that finds one at the head of its stream leaves it to its reader.
  bool interleaved = false;
  // Names a descriptor of this kind in full (nullptr: from the fields above).
  std::string (*describe)(const struct OpDesc& d) = nullptr;
};
// Registers a kind (at load time; an id used twice is a bug and aborts).
bool registerOpKind(const OpKindInfo& k);
// The kind with that id (an unknown id: a placeholder named "unknown operation").
const OpKindInfo& opKind(uint8_t id);

// "allreduce of 1048576 float32 (sum) at level 4, #3"
std::string describe(const OpDesc& d);
// Empty when `theirs` (received from a peer) matches `mine` by the rules of
// mine's kind, else the sentence naming both sides.
std::string descMismatch(const OpDesc& mine, const OpDesc& theirs);
// The same test without the sentence (a call's common case: they match).
bool descMatches(const OpDesc& mine, const OpDesc& theirs);
// Payload bytes of a call: what decides whether it is small, the same on
// every rank that issued it (descriptor fields only).
inline uint64_t payloadBytes(const OpDesc& d) {
  return d.count * typeSize(static_cast<ternDataType_t>(d.dtype));
}

// How an operation is carried out: next() fills the phase to run now (doing
// any local work that belongs before it) and sets *more; when it sets *more to
// false the operation is complete (after that call's local work).  Called on
// the executor's thread, first when the operation may start, then each time
// the previous phase's programs have finished.
//
// The phase next() fills is empty or holds one empty program (left there by a
// recycled operation for its step storage, see resetPhase): a plan makes its
// programs with progs.resize(k) or appends them; an empty program is done
// before it starts, so one left ahead of appended ones changes nothing.
class Task {
 public:
  virtual ~Task() = default;
  virtual ternResult_t next(const PlanCtx& ctx, Phase* ph, bool* more) = 0;
  // A receive from any source learns its peer before its first phase.
  virtual void bindPeer(int peer) { (void)peer; }
  // Its operation goes back to the communicator's pool: a task that can be
  // set up again for a later call (makeTask's dense task) lets go of what it
  // holds and returns true; any other is destroyed right away, so nothing it
  // references (ternary residuals, codec buffers) outlives the operation.
  virtual bool recycle() { return false; }
};

// Empties a phase for the next plan, keeping the first program's step
// storage (nearly every plan is one program of a few steps: an allocation
// less per phase).  Large step storage is freed instead.
void resetPhase(Phase& ph);

class OpPool;

// Operations are reused (OpPool below): a field added here is also reset in
// Operation::reset (operation.cc).
struct Operation {
  OpDesc desc;
  int level = TERN_PRIORITY_DEFAULT;
  bool collective = true;   // a collective waits for every earlier operation of its level
  int peer = -1;            // p2p: the other rank
  bool send = false;        // p2p: direction
  // A receive from any source: peer stays -1 until the executor sees which
  // peer's send arrives first, then *source (the caller's) gets it.
  bool anySource = false;
  int* source = nullptr;
  bool unbound() const { return anySource && peer < 0; }
  // Outside its level's issue order (a weight stream's): nobody waits for
  // it and it waits for nobody, it takes no sequence number, and its kind is
  // interleaved, so it moves whole framed messages between other operations'
  // on a stream (StreamMarks::reader / writer).
  bool unordered = false;
  // Stays admitted while it has nothing to do (a stream's receiver, which
  // must drain whatever arrives): not counted as outstanding (drain() does
  // not wait for it), never timed out while it listens, and driven by the
  // progress thread while admitted.
  bool standing = false;
  // How its waiter waits (Executor::wait), decided by the submitting thread
  // before the executor sees the operation (a stream's task rewrites desc
  // while it runs).  kAsync: an async request small enough for its waiter
  // to drive once it is alone in flight.  kDrives: a blocking call, whose
  // caller waits at once and may drive it (Executor::submit's `wake` false,
  // or the small path's hand-over).  kSleeps: an async request too large
  // for its waiter to drive; it sleeps on doneWord until it is done.
  enum class Waiter : uint8_t { kAsync, kDrives, kSleeps };
  Waiter waiter = Waiter::kAsync;
  uint64_t stamp = 0;  // issue order across levels (Executor::submit; see Phase::postedAt)
  // Device buffers on a caller's stream: this operation's own memory
  // operations (memory.h, "Async contract"; ctx.mem points here), made and
  // begun by the API when called.  Null for host buffers (ctx.mem is then
  // the shared host type).
  std::unique_ptr<MemOps> streamMem;
  // A PreMulSum op (api/premul.cc): when the operation starts, ctx.mem
  // scales the caller's input into `scaled`, which its plan reads as the
  // send buffer (NCCL multiplies each input by the rank's scalar).
  struct PreMul {
    size_t count = 0;  // elements; 0: not a PreMulSum
    ternDataType_t dt = ternFloat32;
    const void* src = nullptr;
    void* scaled = nullptr;         // host memory, or streamMem's scratch()
    const void* scalar = nullptr;   // one element, read when the operation starts
    unsigned char value[8] = {};    // an immediate scalar (scalar points here)
    std::shared_ptr<void> keep;     // what holds a host `scaled`
  } premul;
  PlanCtx ctx;
  std::unique_ptr<Task> task;

  // Executor state (its thread only).
  Phase phase;
  bool begun = false;
  // Its plan is through; an asynchronous memory type's last work may still
  // run on the device: complete once drainFence is done.
  bool draining = false;
  uint64_t drainFence = 0;
  std::vector<Conn*> pumps;                    // connections the phase must pump
  std::vector<Conn*> opening;                  // the phase's connections still opening: it waits
  std::vector<const Conn*> greetedIn, greetedOut;  // streams the descriptor went over
  std::vector<Conn*> held;                     // streams it reads / writes a message on (letGo)
  bool greetedInFrom(const Conn* c) const { return has(greetedIn, c); }
  bool greetedOutTo(const Conn* c) const { return has(greetedOut, c); }
  // Stall detection off the hot path: steps count their moves, and the
  // idle check (every 20 ms at most) notes when the count last changed.
  uint64_t moves = 0, movesSeen = ~uint64_t(0);
  Clock::time_point idleSince{};

  // Completion, read by any thread.
  std::atomic<bool> done{false};
  // Set after `done`: the word an async request's waiter sleeps on
  // (base/futex.h), so a completion wakes that waiter only; `sleepers`
  // tells complete() whether anyone sleeps on it.
  std::atomic<uint32_t> doneWord{0};
  std::atomic<int> sleepers{0};
  ternResult_t result = ternSuccess;
  std::string error;

 private:
  friend class OpPtr;
  friend class OpPool;
  Operation() = default;
  // Back to the state of a new operation; vectors keep their capacity.
  void reset();
  static bool has(const std::vector<const Conn*>& v, const Conn* c) {
    return std::find(v.begin(), v.end(), c) != v.end();
  }
  std::atomic<int> refs_{0};  // OpPtrs to it
  OpPool* pool_ = nullptr;    // where it goes when the last OpPtr lets go
};

// A counted reference to an Operation, like std::shared_ptr (the last one
// to let go, on whichever thread, returns it to its pool; the count's
// acquire-release decrement orders every reader's accesses before its reuse)
// but with the count inside the operation: making one allocates nothing.
class OpPtr {
 public:
  OpPtr() = default;
  OpPtr(std::nullptr_t) {}
  OpPtr(const OpPtr& o) : p_(o.p_) {
    if (p_) p_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  OpPtr(OpPtr&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  OpPtr& operator=(OpPtr o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~OpPtr() {
    if (p_ && p_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) release(p_);
  }
  Operation* get() const { return p_; }
  Operation* operator->() const { return p_; }
  Operation& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  friend class OpPool;
  explicit OpPtr(Operation* p) : p_(p) { p_->refs_.store(1, std::memory_order_relaxed); }
  static void release(Operation* op);
  Operation* p_ = nullptr;
};

// A communicator's spare Operations (its executor owns the pool).  A blocking
// call takes one and the last OpPtr returns it, so a small call allocates
// neither the operation, nor its task (makeTask resets the dense one in
// place), nor its phase, step and connection vectors (they keep their
// capacity).  Requests, groups and other threads hold OpPtrs as before: an
// operation is reused only after every reference is gone, and one that
// outlives the communicator (an OpPtr left in a group never ended) is
// deleted by its last reference, which then also frees the pool.
class OpPool {
 public:
  OpPool() = default;
  OpPool(const OpPool&) = delete;
  OpPool& operator=(const OpPool&) = delete;
  // An operation in its initial state (from the free list, or new).
  OpPtr get();
  // The owner lets go: the spare operations are freed now, the pool itself
  // once no operation from it is held any more.
  void close();

 private:
  friend class OpPtr;
  ~OpPool();
  void put(Operation* op);
  void destroy(Operation* op);
  void drop();  // one count less; the last one deletes the pool
  std::atomic<Operation*> spare_{nullptr};  // one spare, lock-free (kClosed once closed)
  std::atomic<size_t> alive_{1};  // operations that exist (spare or held) + 1 for the owner
  std::mutex mu_;
  std::vector<Operation*> free_;  // more spares, at most kKeep
  bool closed_ = false;
};

}  // namespace tern
