#include "engine/operation.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstddef>

#include "tern/tern.h"

namespace tern {

namespace {

// Every kind by id; zero-initialised before any registration runs.
const OpKindInfo* kinds[256];
const OpKindInfo kUnknown{};

const char* typeName(int dt) {
  static const char* names[] = {"int8",  "uint8",   "int32",   "uint32",  "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  return dt >= 0 && dt < ternNumTypes ? names[dt] : "?";
}

const char* opName(int op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ternNumOps ? names[op] : "?";
}

}  // namespace

bool registerOpKind(const OpKindInfo& k) {
  if (k.id == 0 || (kinds[k.id] && kinds[k.id] != &k)) {
    fprintf(stderr, "tern: operation kind %d (%s) registered twice\n", k.id, k.name);
    abort();
  }
  kinds[k.id] = &k;
  return true;
}

const OpKindInfo& opKind(uint8_t id) { return kinds[id] ? *kinds[id] : kUnknown; }

std::string describe(const OpDesc& d) {
  const OpKindInfo& k = opKind(d.kind);
  if (k.describe) return k.describe(d);
  std::string s = k.name;
  if (k.showCount) s += std::string(" of ") + std::to_string(d.count) + " " + typeName(d.dtype);
  if (k.match & OpKindInfo::kRedop) s += std::string(" (") + opName(d.redop) + ")";
  static const char* roots[] = {"", " with root ", " to rank ", " from rank "};
  if (k.root != OpKindInfo::kNoRoot) s += roots[k.root] + std::to_string(d.root);
  return s + " at priority level " + std::to_string(d.level) + " (#" + std::to_string(d.seq) + ")";
}

// Whether the peer sent a copy of ours, its rank aside: then a kind that
// expects its own kind and root back matches on every field (a small call's
// common case, without the kind's rules).
static bool sameButRank(const OpDesc& a, const OpDesc& b) {
  static_assert(offsetof(OpDesc, root) == 8 && offsetof(OpDesc, count) == 16, "the descriptor's words");
  uint64_t wa[4], wb[4];
  memcpy(wa, &a, sizeof wa);
  memcpy(wb, &b, sizeof wb);
  return wa[0] == wb[0] && a.root == b.root && wa[2] == wb[2] && wa[3] == wb[3];
}

bool descMatches(const OpDesc& mine, const OpDesc& theirs) {
  if (theirs.magic != kDescMagic) return false;
  const OpKindInfo& k = opKind(mine.kind);
  if (!k.peerKind && !k.rootIsMe && sameButRank(mine, theirs)) return true;
  const uint8_t expectKind = k.peerKind ? k.peerKind : mine.kind;
  const int32_t expectRoot = k.rootIsMe ? mine.rank : mine.root;
  auto agree = [&](uint8_t field, bool same) { return !(k.match & field) || same; };
  return theirs.kind == expectKind && theirs.level == mine.level &&
         agree(OpKindInfo::kCount, theirs.count == mine.count) &&
         agree(OpKindInfo::kSeq, theirs.seq == mine.seq) &&
         agree(OpKindInfo::kDtype, theirs.dtype == mine.dtype) &&
         agree(OpKindInfo::kRedop, theirs.redop == mine.redop) &&
         agree(OpKindInfo::kRoot, theirs.root == expectRoot);
}

std::string descMismatch(const OpDesc& mine, const OpDesc& theirs) {
  if (descMatches(mine, theirs)) return std::string();
  if (theirs.magic != kDescMagic)
    return "rank " + std::to_string(mine.rank) +
           " received bytes that are not an operation descriptor while starting its " +
           describe(mine) +
           ": the ranks' operations are out of step; the communicator must be aborted";
  return "rank " + std::to_string(theirs.rank) + " called " + describe(theirs) + " but rank " +
         std::to_string(mine.rank) + " called " + describe(mine) +
         ": every rank must issue the same collectives in the same order at each priority "
         "level (and matching send/recv pairs); the communicator must be aborted "
         "(ternCommAbort)";
}

namespace {
// What a fresh phase and program hold.  Assigning them field by field keeps
// the vectors' storage (a vector assigned an empty one keeps its capacity)
// and zeroes no temporary: building `Program()` on the stack and moving it
// in cost more than the allocation it saves (rep stos, then reloads that
// stall on it).
const Phase kEmptyPhase{};
const Program kEmptyProgram{};

// Every field of a Phase but its programs, from a fresh one.  Moving the
// programs aside and back around a whole-phase assignment cost ~115
// instructions per reset on an 8-byte allreduce (three resets a call).
void resetFields(Phase& ph) {
  static_assert(sizeof(Phase) == sizeof(std::vector<Program>) + sizeof(Reduction) + sizeof(char*) +
                                     8 + sizeof(uint64_t),
                "a field added to Phase is reset here too");
  ph.red = kEmptyPhase.red;
  ph.what = kEmptyPhase.what;
  ph.listening = kEmptyPhase.listening;
  ph.reframe = kEmptyPhase.reframe;
  ph.holdStreams = kEmptyPhase.holdStreams;
  ph.whole = kEmptyPhase.whole;
  ph.fixedGreets = kEmptyPhase.fixedGreets;
  ph.postedAt = kEmptyPhase.postedAt;
}
}  // namespace

void resetPhase(Phase& ph) {
  // More steps than this (a large ring allreduce: two per chunk and peer)
  // are not worth keeping in a spare operation.
  constexpr size_t kKeepSteps = 64;
  resetFields(ph);
  std::vector<Program>& progs = ph.progs;
  if (progs.empty()) return;
  const size_t cap = progs[0].steps.capacity();
  if (cap == 0 || cap > kKeepSteps) {
    std::vector<Program>().swap(progs);  // nothing worth keeping: the old programs go
    return;
  }
  progs.resize(1);
  progs[0] = kEmptyProgram;  // its steps emptied, their storage kept
}

// Every field of Operation: one added there is reset here.
void Operation::reset() {
  desc = OpDesc();
  level = TERN_PRIORITY_DEFAULT;
  collective = true;
  peer = -1;
  send = false;
  anySource = false;
  source = nullptr;
  unordered = false;
  standing = false;
  waiter = Waiter::kAsync;
  stamp = 0;
  streamMem.reset();  // releases the caller's stream if a failure left it held
  premul = PreMul();
  ctx = PlanCtx();
  // task: kept by put() when it can be set up again, else already gone
  resetPhase(phase);
  begun = false;
  draining = false;
  drainFence = 0;
  pumps.clear();
  opening.clear();
  greetedIn.clear();
  greetedOut.clear();
  held.clear();
  moves = 0;
  movesSeen = ~uint64_t(0);
  idleSince = Clock::time_point{};
  done.store(false, std::memory_order_relaxed);
  doneWord.store(0, std::memory_order_relaxed);
  sleepers.store(0, std::memory_order_relaxed);
  result = ternSuccess;
  error.clear();
}

void OpPtr::release(Operation* op) {
  if (op->pool_) op->pool_->put(op);
  else delete op;
}

namespace {
// Spare operations a pool keeps: a blocking caller needs one at a time; a
// burst of async requests larger than this allocates the rest as before.
constexpr size_t kKeep = 64;
// In spare_ once the pool is closed: put() can no longer park one there.
Operation* const kClosed = reinterpret_cast<Operation*>(uintptr_t(1));
}  // namespace

// The one-at-a-time case (a blocking call takes an operation and returns it
// before the next) goes through spare_ alone: one atomic exchange each way,
// no lock.  Only the owner calls get(), and never after close().
OpPtr OpPool::get() {
  Operation* op = spare_.exchange(nullptr, std::memory_order_acquire);
  if (!op) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!free_.empty()) {
      op = free_.back();
      free_.pop_back();
    }
  }
  if (!op) {
    alive_.fetch_add(1, std::memory_order_relaxed);
    op = new Operation();
    op->pool_ = this;
  }
  return OpPtr(op);
}

// On the thread that dropped the last reference (the caller's, the
// executor's, or whoever releases a request).
void OpPool::put(Operation* op) {
  if (op->task && !op->task->recycle()) op->task.reset();
  op->reset();
  Operation* none = nullptr;
  if (spare_.compare_exchange_strong(none, op, std::memory_order_release, std::memory_order_relaxed))
    return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!closed_ && free_.size() < kKeep) {
      free_.push_back(op);
      return;
    }
  }
  destroy(op);
}

void OpPool::destroy(Operation* op) {
  delete op;
  drop();
}

void OpPool::drop() {
  if (alive_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void OpPool::close() {
  std::vector<Operation*> spare;
  Operation* s = spare_.exchange(kClosed, std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    spare.swap(free_);
  }
  if (s) spare.push_back(s);
  for (Operation* op : spare) destroy(op);
  drop();  // the owner's count
}

OpPool::~OpPool() = default;

}  // namespace tern
