// Plans checked without processes (issue 24): every rank's plan of a
// collective, built in one process by the real tasks (makeTask, Task::next,
// the plan functions), is played against the other ranks' on simulated
// streams, and the test asserts that
//  - each send meets a receive of the same size at the same stream position
//    (per directed stream: the fifo and its low-latency sibling apart), laid
//    out as the engine lays them (program.cc's lay(): padding, a descriptor
//    on an operation's first use of a stream, padding to 8);
//  - the descriptor each receive reads names the same operation;
//  - nothing is left unread and no step waits forever (a round in which no
//    rank can move while some has steps left is a deadlock, reported with
//    what each rank waits on);
//  - the data the steps move is the reference result (int32 / float32
//    buffers through the Step semantics of step_payload.cc's executeStep(), reduced by
//    the host MemOps the engine uses).
// Streams are bounded (the fifo's capacity), and each visit moves a random
// slice of a step, so pipelined steps interleave as they do in the engine.
// What it does not model: the transports themselves, single-copy (direct)
// steps' headers (connections here offer none: directMin() is 0), codec
// steps (the ternary allreduce), and the executor's priorities.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "engine/operation.h"
#include "engine/program.h"
#include "memory/memory.h"
#include "sanitizers.h"
#include "topology/hosts.h"

namespace tern {
namespace {

// The most ranks a sweep plays.  Under the sanitizers 10: a plan's memory
// errors and races show at any width, and a play's cost grows with the
// square of the ranks (its streams): played to 16 ranks, these tests took
// ~80 of the AddressSanitizer stage's ~1,150 test seconds (2026-12-05).
// The plain stage plays every width to 16.
constexpr int kMaxRanks = terntest::kUnderSanitizer ? 10 : 16;

// One directed stream: the bytes written and not yet read, positions, and
// the messages laid on it by each side, in order.
struct Msg {
  uint64_t pos;  // where the payload starts on the stream
  size_t bytes;
  bool operator==(const Msg& o) const { return pos == o.pos && bytes == o.bytes; }
};
struct Stream {
  std::deque<char> bytes;
  uint64_t sendPos = 0, recvPos = 0;
  size_t cap = 0;
  std::vector<Msg> sent, received;
  size_t space() const { return cap - bytes.size(); }
};

// A connection as a plan sees it: an identity (rank -> peer) with the
// fifo's record alignment, and its low-latency sibling when LL is on.
class SimConn final : public InertConn {
 public:
  SimConn(int rank, int peer, bool ll) : rank_(rank), ll_(ll) { this->peer = peer; }
  const char* name() const override { return ll_ ? "sim-ll" : "sim"; }
  size_t recordAlign() const override { return ll_ ? 8 : 32; }
  Conn* small(uint64_t opBytes) override {
    return sibling_ && opBytes <= limit_ ? sibling_.get() : nullptr;
  }
  void attachSibling(size_t limit) {
    limit_ = limit;
    sibling_ = std::make_unique<SimConn>(rank_, peer, true);
    sibling_->owner = this;
  }
  int rank() const { return rank_; }
  bool ll() const { return ll_; }

 private:
  int rank_;
  bool ll_;
  size_t limit_ = 0;
  std::unique_ptr<SimConn> sibling_;
};

// One rank's copy of one operation, and where its programs stand.
struct SimOp {
  CollArgs args;
  std::unique_ptr<Task> task;
  Phase phase;
  bool begun = false, finished = false;
  std::set<Conn*> greetedIn, greetedOut;
  struct Cursor {
    size_t cur = 0, off = 0;
    bool laid = false;
    size_t inLead = 0, outLead = 0;  // padding and descriptor still to skip / write
  };
  std::vector<Cursor> cursors;
  bool collective() const { return args.kind != OpKind::Send && args.kind != OpKind::Recv; }
  uint64_t opBytes() const { return args.count * ternTypeSize(args.dt); }
};

struct Config4 {
  size_t chunk, fifo, small, ll;  // bytes; ll 0: no low-latency siblings
};

class World {
 public:
  World(int n, const Config4& k, uint32_t seed) : n_(n), rng_(seed) {
    cfg_.chunkBytes = k.chunk;
    cfg_.fifoBytes = k.fifo;
    cfg_.smallBytes = k.small;
    cfg_.llBytes = k.ll;
    cfg_.shmDirectBytes = 0;
    // A ring order other than rank order (plans must go by position).
    ring_.resize(n);
    std::iota(ring_.begin(), ring_.end(), 0);
    std::shuffle(ring_.begin() + (n > 1 ? 1 : 0), ring_.end(), rng_);
    ringPos_.resize(n);
    for (int p = 0; p < n; ++p) ringPos_[ring_[p]] = p;
    conns_.resize(n);
    connPtrs_.resize(n);
    for (int r = 0; r < n; ++r) {
      connPtrs_[r].made.reset(new std::atomic<Conn*>[n]);
      for (int p = 0; p < n; ++p) {
        conns_[r].push_back(std::make_unique<SimConn>(r, p, false));
        if (k.ll) conns_[r].back()->attachSibling(k.ll);
        connPtrs_[r].made[p] = conns_[r].back().get();
      }
    }
    for (int ll = 0; ll < 2; ++ll) {
      streams_[ll].assign(static_cast<size_t>(n) * n, Stream());
      for (Stream& s : streams_[ll]) s.cap = ll ? 16 << 10 : k.fifo;  // LL: one private stage
    }
    ops_.resize(n);
  }

  int n() const { return n_; }
  // Ranks on hosts (ids[r]: rank r's host) for host-aware plans, and the
  // allreduce's algorithm (TERN_ALGO).
  void setHosts(const std::vector<uint64_t>& ids, const char* algo) {
    hosts_ = groupByHost(ids);
    hasHosts_ = true;
    cfg_.algo = algo;
  }
  // Messages the fifo streams (ll false) or the low-latency ones carried.
  size_t messages(bool ll) const {
    size_t m = 0;
    for (const Stream& s : streams_[ll]) m += s.sent.size();
    return m;
  }
  const Config& cfg() const { return cfg_; }

  // Rank r issues an operation (in issue order, like the API).
  void issue(int r, const CollArgs& a) {
    auto op = std::make_unique<SimOp>();
    op->args = a;
    op->task = makeTask(a);
    ops_[r].push_back(std::move(op));
  }

  // Plays every rank until all operations are complete; an empty string, or
  // what went wrong (a mismatch, a deadlock, bytes left unread).
  std::string run() {
    for (int rounds = 0;; ++rounds) {
      bool moved = false, left = false;
      for (int r = 0; r < n_; ++r) {
        for (size_t i = 0; i < ops_[r].size(); ++i) {
          SimOp& op = *ops_[r][i];
          if (op.finished) continue;
          left = true;
          if (!runnable(r, i)) continue;
          if (!error_.empty()) return error_;
          moved |= visit(r, op);
          if (!error_.empty()) return error_;
        }
      }
      if (!left) break;
      if (!moved) return "deadlock: " + waits();
      if (rounds > 10000000) return "runaway";
    }
    return checkStreams();
  }

 private:
  PlanCtx ctx(int r) const {
    PlanCtx x;
    x.rank = r;
    x.nranks = n_;
    x.ring = &ring_;
    x.ringPos = &ringPos_;
    x.conns = &connPtrs_[r];  // every one made: nothing to make
    x.cfg = &cfg_;
    x.mem = memOps(MemType::Host);
    x.hosts = hasHosts_ ? &hosts_ : nullptr;
    return x;
  }

  // The executor's issue order (Executor::runnable): a collective waits for
  // every earlier operation, a transfer for earlier collectives and earlier
  // transfers to the same peer in the same direction.
  bool runnable(int r, size_t i) const {
    const SimOp& op = *ops_[r][i];
    for (size_t j = 0; j < i; ++j) {
      const SimOp& e = *ops_[r][j];
      if (e.finished) continue;
      if (op.collective() || e.collective() ||
          (e.args.kind == op.args.kind && e.args.root == op.args.root))
        return false;
    }
    return true;
  }

  Stream& stream(const Conn* c, bool out) {
    const auto* s = static_cast<const SimConn*>(c);
    const int from = out ? s->rank() : s->peer, to = out ? s->peer : s->rank();
    return streams_[s->ll()][static_cast<size_t>(from) * n_ + to];
  }

  // The phases as Executor::beginPhase makes them: the task's phases.
  bool beginPhase(int r, SimOp& op) {
    for (;;) {
      resetPhase(op.phase);
      bool more = false;
      PlanCtx x = ctx(r);
      if (op.task->next(x, &op.phase, &more) != ternSuccess) {
        error_ = "rank " + std::to_string(r) + ": plan failed";
        return false;
      }
      if (!more) {
        op.finished = true;
        return true;
      }
      bool any = false;
      for (const Program& p : op.phase.progs) any |= !p.steps.empty();
      if (any) break;
    }
    if (cfg_.llBytes) takeSmallChannels(op.phase, op.opBytes());
    op.cursors.assign(op.phase.progs.size(), SimOp::Cursor());
    return true;
  }

  // A descriptor names the operation: its kind (a receive meets a send),
  // count, datatype and op, as the engine's OpDesc does.
  std::vector<char> descriptor(const SimOp& op) const {
    uint64_t d[4] = {op.collective() ? static_cast<uint64_t>(op.args.kind) : 99, op.args.count,
                     static_cast<uint64_t>(op.args.dt), static_cast<uint64_t>(op.args.op)};
    std::vector<char> v(32);
    memcpy(v.data(), d, 32);
    return v;
  }

  // Lays a step out on its streams as program.cc's lay() does.
  void lay(SimOp& op, SimOp::Cursor& c, const Step& s) {
    auto lead = [&](Conn* k, bool out) {
      Stream& st = stream(k, out);
      const bool greeted = out ? op.greetedOut.count(k) : op.greetedIn.count(k);
      uint64_t pos = out ? st.sendPos : st.recvPos;
      size_t desc = greeted ? 0 : 32;
      size_t skip = desc ? recordSkip(pos, k->recordAlign()) : alignUp(pos, 8);
      pos += skip + desc;
      skip += alignUp(pos, 8);
      (out ? st.sent : st.received).push_back({pos + alignUp(pos, 8), s.bytes});
      return skip + desc;
    };
    c.inLead = s.in ? lead(s.in, false) : 0;
    c.outLead = s.out ? lead(s.out, true) : 0;
    c.laid = true;
  }

  // The lead (padding, descriptor) of a step: written once the stream has
  // room for it, read once it arrived (the descriptor checked).
  bool prologue(int r, SimOp& op, SimOp::Cursor& c, const Step& s, bool* moved) {
    if (s.in && c.inLead) {
      Stream& st = stream(s.in, false);
      if (st.bytes.size() < c.inLead) return false;
      const bool desc = !op.greetedIn.count(s.in);
      std::vector<char> got(st.bytes.begin(), st.bytes.begin() + c.inLead);
      if (desc && !std::equal(got.end() - 32, got.end(), descriptor(op).begin()))
        error_ = "rank " + std::to_string(r) + " read another operation's descriptor from rank " +
                 std::to_string(s.in->peer);
      st.bytes.erase(st.bytes.begin(), st.bytes.begin() + c.inLead);
      st.recvPos += c.inLead;
      op.greetedIn.insert(s.in);
      c.inLead = 0;
      *moved = true;
    }
    if (s.out && c.outLead) {
      Stream& st = stream(s.out, true);
      if (st.space() < c.outLead) return false;
      const bool desc = !op.greetedOut.count(s.out);
      std::vector<char> lead(c.outLead - (desc ? 32 : 0), 0);
      if (desc) {
        std::vector<char> d = descriptor(op);
        lead.insert(lead.end(), d.begin(), d.end());
      }
      st.bytes.insert(st.bytes.end(), lead.begin(), lead.end());
      st.sendPos += c.outLead;
      op.greetedOut.insert(s.out);
      c.outLead = 0;
      *moved = true;
    }
    return c.inLead + c.outLead == 0;
  }

  // Moves up to a random slice of the step's payload, as step_payload.cc's
  // payload() and executeStep() do: a step reduces what arrives with `local`
  // into dst (or straight on) by its program's reduction, or copies what
  // arrives (or `local`) on.
  bool payload(SimOp& op, SimOp::Cursor& c, const Step& s, const Reduction& red) {
    const size_t unit = s.reduce ? ternTypeSize(red.dt) : 1;
    size_t n = std::uniform_int_distribution<size_t>(1, 3 * cfg_.chunkBytes)(rng_);
    n = std::min(s.bytes - c.off, std::max(n - n % unit, unit));
    Stream* in = s.in ? &stream(s.in, false) : nullptr;
    Stream* out = s.out ? &stream(s.out, true) : nullptr;
    if (in) n = std::min(n, in->bytes.size());
    if (out) n = std::min(n, out->space());
    n -= n % unit;
    if (n == 0) return false;
    std::vector<char> got(n), sent(n);
    if (in) {
      std::copy(in->bytes.begin(), in->bytes.begin() + n, got.begin());
      in->bytes.erase(in->bytes.begin(), in->bytes.begin() + n);
      in->recvPos += n;
    }
    const char* loc = s.local ? s.local + c.off : nullptr;
    char* dst = s.dst ? s.dst + c.off : nullptr;
    const MemOps& mem = *memOps(MemType::Host);
    if (s.reduce) {
      char* target = dst ? dst : sent.data();
      mem.reduce(target, got.data(), loc, n / ternTypeSize(red.dt), red.dt, red.op,
                 s.finalAvg ? n_ : 0);
      if (dst) memcpy(sent.data(), dst, n);
    } else {
      const char* src = in ? got.data() : loc;
      memcpy(sent.data(), src, n);
      if (dst) memcpy(dst, src, n);
    }
    if (out) {
      out->bytes.insert(out->bytes.end(), sent.begin(), sent.end());
      out->sendPos += n;
    }
    c.off += n;
    return true;
  }

  bool visit(int r, SimOp& op) {
    bool moved = false;
    if (!op.begun) {
      op.begun = moved = true;
      if (!beginPhase(r, op) || op.finished) return true;
    }
    bool allDone = true;
    for (size_t i = 0; i < op.phase.progs.size(); ++i) {
      Program& p = op.phase.progs[i];
      SimOp::Cursor& c = op.cursors[i];
      while (c.cur < p.steps.size() && error_.empty()) {
        const Step& s = p.steps[c.cur];
        if (!c.laid) lay(op, c, s);
        if (!prologue(r, op, c, s, &moved)) break;
        if (c.off < s.bytes) {
          moved |= payload(op, c, s, reductionOf(op.phase, p));
          if (c.off < s.bytes) break;
        }
        ++c.cur;
        c.off = 0;
        c.laid = false;
        moved = true;
      }
      allDone &= c.cur >= p.steps.size();
    }
    if (allDone && error_.empty()) beginPhase(r, op);
    return moved;
  }

  // What every unfinished rank waits on (the deadlock's sentence).
  std::string waits() {
    std::string w;
    for (int r = 0; r < n_; ++r)
      for (size_t i = 0; i < ops_[r].size(); ++i) {
        SimOp& op = *ops_[r][i];
        if (op.finished) continue;
        w += "rank " + std::to_string(r) + " op " + std::to_string(i) + " (" + op.phase.what + ")";
        for (size_t k = 0; k < op.phase.progs.size(); ++k) {
          const Program& p = op.phase.progs[k];
          if (op.cursors.size() <= k || op.cursors[k].cur >= p.steps.size()) continue;
          const Step& s = p.steps[op.cursors[k].cur];
          w += " [step " + std::to_string(op.cursors[k].cur) + ": in " +
               (s.in ? std::to_string(s.in->peer) : "-") + " out " +
               (s.out ? std::to_string(s.out->peer) : "-") + " " + std::to_string(s.bytes) + " B]";
        }
        w += "; ";
        break;
      }
    return w;
  }

  std::string checkStreams() const {
    for (int ll = 0; ll < 2; ++ll)
      for (int a = 0; a < n_; ++a)
        for (int b = 0; b < n_; ++b) {
          const Stream& s = streams_[ll][static_cast<size_t>(a) * n_ + b];
          const std::string at = (ll ? "LL stream " : "stream ") + std::to_string(a) + "->" + std::to_string(b);
          if (s.sent.size() != s.received.size())
            return at + ": " + std::to_string(s.sent.size()) + " messages sent, " +
                   std::to_string(s.received.size()) + " received";
          for (size_t i = 0; i < s.sent.size(); ++i)
            if (!(s.sent[i] == s.received[i]))
              return at + ": message " + std::to_string(i) + " sent as " + std::to_string(s.sent[i].bytes) +
                     " B at " + std::to_string(s.sent[i].pos) + ", received as " +
                     std::to_string(s.received[i].bytes) + " B at " + std::to_string(s.received[i].pos);
          if (!s.bytes.empty() || s.sendPos != s.recvPos)
            return at + ": " + std::to_string(s.bytes.size()) + " bytes left unread";
        }
    return std::string();
  }

  int n_;
  std::mt19937 rng_;
  Config cfg_{};
  std::vector<int> ring_, ringPos_;
  std::vector<std::vector<std::unique_ptr<SimConn>>> conns_;
  std::vector<LevelConns> connPtrs_;  // [rank].made[peer]
  std::vector<Stream> streams_[2];
  std::vector<std::vector<std::unique_ptr<SimOp>>> ops_;
  std::string error_;
  HostLayout hosts_;
  bool hasHosts_ = false;
};

// Rank r's input element i: distinct per rank and element, small enough
// that sums of 16 ranks stay exact.
int32_t input(int r, size_t i) { return static_cast<int32_t>((r + 1) * 1000 + (i * 7) % 997) - 500; }

using Bufs = std::vector<std::vector<int32_t>>;

// int32 sum unless told: the arguments the tests vary most come first.
CollArgs coll(OpKind k, const void* s, void* d, size_t count, int root = -1,
              ternRedOp_t op = ternSum, ternDataType_t dt = ternInt32) {
  return collArgs(k, s, d, count, dt, op, root);
}

// The configurations played: small fifos and chunks (many pipeline pieces,
// full streams), the defaults' proportions, and low-latency siblings on.
const Config4 kConfigs[] = {
    {64, 256, 64, 0},       // tiny chunks: many pieces; recursive doubling up to 16 int32
    {256, 4096, 1024, 0},   // larger fifos; recursive doubling up to 256 int32
    {128, 1024, 256, 512},  // LL siblings up to 512 B (the small-message path)
};
const size_t kCounts[] = {1, 5, 16, 67, 300};

using Case = std::function<void(World&, int /*count*/, Bufs&, Bufs&, std::vector<int32_t>&)>;

// Plays `c` at 1-16 ranks for every configuration and count: sets up the
// ranks' buffers and operations (c), runs, and compares with the reference.
void playAll(const char* what, const Case& setup,
             const std::function<void(int n, size_t count, const Bufs& out, const std::vector<int32_t>& aux)>& check) {
  uint32_t seed = 1;
  for (const Config4& k : kConfigs)
    for (size_t count : kCounts)
      for (int n = 1; n <= kMaxRanks; ++n) {
        World w(n, k, seed++);
        const bool failedBefore = ::testing::Test::HasFailure();
        Bufs in(n), out(n);
        std::vector<int32_t> aux;
        setup(w, static_cast<int>(count), in, out, aux);
        std::string err = w.run();
        ASSERT_EQ(err, "") << what << " at " << n << " ranks, count " << count << ", chunk "
                           << k.chunk << ", fifo " << k.fifo << ", small " << k.small << ", ll " << k.ll;
        check(n, count, out, aux);
        // The small-message path is played: small operations' messages go
        // on the low-latency streams only.
        if (k.ll && n > 1 && count * sizeof(int32_t) <= k.ll) {
          EXPECT_EQ(w.messages(false), 0u) << what;
          EXPECT_GT(w.messages(true), 0u) << what;
        }
        if (!failedBefore && ::testing::Test::HasFailure()) {
          ADD_FAILURE() << what << " at " << n << " ranks, count " << count << ", chunk " << k.chunk;
          return;
        }
      }
}

void fill(Bufs& b, int n, size_t count, size_t perRank = 1) {
  for (int r = 0; r < n; ++r) {
    b[r].resize(count * perRank);
    for (size_t i = 0; i < b[r].size(); ++i) b[r][i] = input(r, i);
  }
}

int64_t sumAt(int n, size_t i) {
  int64_t s = 0;
  for (int r = 0; r < n; ++r) s += input(r, i);
  return s;
}

// Allreduce by both algorithms: the configurations' thresholds pick
// recursive doubling for the small counts and the ring for the others (at
// every rank count each is reached); sum out of place, max in place.
TEST(PlanPlay, AllReduce) {
  playAll("allreduce sum", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>&) {
    fill(in, w.n(), count);
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count, -1);
      w.issue(r, coll(OpKind::AllReduce, in[r].data(), out[r].data(), count));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][i], sumAt(n, i)) << "rank " << r << " [" << i << "]";
  });
  playAll("allreduce max in place", [](World& w, int count, Bufs&, Bufs& out, std::vector<int32_t>&) {
    fill(out, w.n(), count);
    for (int r = 0; r < w.n(); ++r)
      w.issue(r, coll(OpKind::AllReduce, out[r].data(), out[r].data(), count, -1, ternMax));
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        int32_t m = input(0, i);
        for (int q = 1; q < n; ++q) m = std::max(m, input(q, i));
        ASSERT_EQ(out[r][i], m) << "rank " << r << " [" << i << "]";
      }
  });
}

// The ring and recursive doubling each at every size (the threshold forced
// both ways), with float32 average (the ring divides in its last reduction,
// recursive doubling after its program).
TEST(PlanPlay, AllReduceBothAlgorithmsAverage) {
  for (size_t small : {size_t(0), size_t(1) << 20})
    for (int n = 1; n <= kMaxRanks; ++n)
      for (size_t count : {size_t(1), size_t(33), size_t(200)}) {
        World w(n, {64, small ? size_t(8) << 20 : size_t(256), small, 0}, static_cast<uint32_t>(n * 131 + count));
        std::vector<std::vector<float>> buf(n, std::vector<float>(count));
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<float>(input(r, i));
        for (int r = 0; r < n; ++r)
          w.issue(r, coll(OpKind::AllReduce, buf[r].data(), buf[r].data(), count, -1, ternAvg, ternFloat32));
        ASSERT_EQ(w.run(), "") << (small ? "recursive doubling" : "ring") << " at " << n << " ranks, count " << count;
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            ASSERT_NEAR(buf[r][i], static_cast<double>(sumAt(n, i)) / n, 1e-2) << "rank " << r;
      }
}

// The two-level allreduce (issue 45) at 1-16 ranks on 1-4 hosts: hosts of
// equal and unequal sizes, their ranks contiguous or interleaved, counts
// that the slices do not divide (and fewer elements than ranks); int32 sum
// out of place and float32 average in place (the division at each element's
// last reduction), against the reference.
TEST(PlanPlay, AllReduceTwoLevel) {
  uint32_t seed = 7;
  for (int hosts = 1; hosts <= 4; ++hosts)
    for (int n = hosts; n <= kMaxRanks; ++n)
      for (int layout = 0; layout < 3; ++layout) {
        // 0: blocks (the first hosts one rank larger); 1: round robin; 2: all but
        // hosts-1 ranks on the last host.
        std::vector<uint64_t> ids(n);
        for (int r = 0; r < n; ++r)
          ids[r] = layout == 0 ? r * hosts / n : layout == 1 ? r % hosts : std::min(r, hosts - 1);
        for (size_t count : {size_t(1), size_t(67), size_t(300)}) {
          const Config4 k = kConfigs[seed % 2];
          World w(n, {k.chunk, k.fifo, 0, 0}, seed++);
          w.setHosts(ids, "twolevel");
          Bufs in(n), out(n);
          fill(in, n, count);
          std::vector<std::vector<float>> avg(n, std::vector<float>(count));
          for (int r = 0; r < n; ++r) {
            out[r].assign(count, -1);
            for (size_t i = 0; i < count; ++i) avg[r][i] = static_cast<float>(input(r, i));
            w.issue(r, coll(OpKind::AllReduce, in[r].data(), out[r].data(), count));
            w.issue(r, coll(OpKind::AllReduce, avg[r].data(), avg[r].data(), count, -1, ternAvg, ternFloat32));
          }
          const std::string at = std::to_string(n) + " ranks on " + std::to_string(hosts) + " hosts (layout " +
                                 std::to_string(layout) + "), count " + std::to_string(count);
          ASSERT_EQ(w.run(), "") << at;
          for (int r = 0; r < n; ++r)
            for (size_t i = 0; i < count; ++i) {
              ASSERT_EQ(out[r][i], sumAt(n, i)) << at << ", rank " << r << " [" << i << "]";
              ASSERT_FLOAT_EQ(avg[r][i], static_cast<float>(static_cast<double>(sumAt(n, i)) / n))
                  << at << ", rank " << r << " [" << i << "]";
            }
        }
      }
}

// The two-level allgather at 1-16 ranks on 1-4 hosts of as many ranks each
// (uneven hosts take the ring, and are played too), contiguous or
// interleaved, out of place and in place; blocks of 2000 int32 are cut in
// pieces (3 at 256-byte chunks, 8 at 64) whose stages overlap over phases.
TEST(PlanPlay, AllGatherTwoLevel) {
  uint32_t seed = 11;
  for (int hosts = 1; hosts <= 4; ++hosts)
    for (int n = hosts; n <= kMaxRanks; ++n)
      for (int layout = 0; layout < 2; ++layout)
        for (size_t count : {size_t(1), size_t(67), size_t(2000)})
          for (bool inPlace : {false, true}) {
            std::vector<uint64_t> ids(n);
            for (int r = 0; r < n; ++r) ids[r] = layout == 0 ? r * hosts / n : r % hosts;
            const Config4 k = kConfigs[seed % 2];
            World w(n, {k.chunk, k.fifo, 0, 0}, seed++);
            w.setHosts(ids, "twolevel");
            Bufs in(n), out(n);
            fill(in, n, count);
            for (int r = 0; r < n; ++r) {
              out[r].assign(count * n, -1);
              if (inPlace) std::copy(in[r].begin(), in[r].end(), out[r].begin() + r * count);
              w.issue(r, coll(OpKind::AllGather, inPlace ? out[r].data() + r * count : in[r].data(),
                              out[r].data(), count));
            }
            const std::string at = std::to_string(n) + " ranks on " + std::to_string(hosts) + " hosts (layout " +
                                   std::to_string(layout) + "), count " + std::to_string(count);
            ASSERT_EQ(w.run(), "") << at;
            for (int r = 0; r < n; ++r)
              for (int q = 0; q < n; ++q)
                for (size_t i = 0; i < count; ++i)
                  ASSERT_EQ(out[r][q * count + i], input(q, i)) << at << ", rank " << r;
          }
}

TEST(PlanPlay, BroadcastAndReduce) {
  playAll("broadcast", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>& aux) {
    const int root = (count * 3) % w.n();
    aux = {root};
    fill(in, w.n(), count);
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count, -1);
      w.issue(r, coll(OpKind::Broadcast, in[r].data(), out[r].data(), count, root));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>& aux) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][i], input(aux[0], i)) << "rank " << r;
  });
  playAll("reduce", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>& aux) {
    const int root = (count + w.n() / 2) % w.n();
    aux = {root};
    fill(in, w.n(), count);
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count, -1);
      w.issue(r, coll(OpKind::Reduce, in[r].data(), out[r].data(), count, root));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>& aux) {
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[aux[0]][i], sumAt(n, i));
  });
}

TEST(PlanPlay, AllGatherAndReduceScatter) {
  playAll("allgather", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>&) {
    fill(in, w.n(), count);
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count * w.n(), -1);
      w.issue(r, coll(OpKind::AllGather, in[r].data(), out[r].data(), count));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
    for (int r = 0; r < n; ++r)
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][q * count + i], input(q, i)) << "rank " << r;
  });
  playAll("reduce-scatter", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>&) {
    fill(in, w.n(), count, w.n());
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count, -1);
      w.issue(r, coll(OpKind::ReduceScatter, in[r].data(), out[r].data(), count));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][i], sumAt(n, r * count + i)) << "rank " << r;
  });
}

// All-to-all out of place and in place (small blocks go as one program,
// large ones as a program per peer and direction), gather and scatter.
TEST(PlanPlay, AllToAllGatherScatter) {
  for (bool inPlace : {false, true})
    playAll(inPlace ? "all-to-all in place" : "all-to-all",
            [inPlace](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>&) {
      fill(in, w.n(), count, w.n());
      for (int r = 0; r < w.n(); ++r) {
        out[r] = inPlace ? in[r] : std::vector<int32_t>(count * w.n(), -1);
        w.issue(r, coll(OpKind::AllToAll, inPlace ? out[r].data() : in[r].data(), out[r].data(), count));
      }
    }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][q * count + i], input(q, r * count + i));
    });
  playAll("gather", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>& aux) {
    const int root = (count * 5 + 1) % w.n();
    aux = {root};
    fill(in, w.n(), count);
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count * w.n(), -1);
      w.issue(r, coll(OpKind::Gather, in[r].data(), out[r].data(), count, root));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>& aux) {
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[aux[0]][q * count + i], input(q, i));
  });
  playAll("scatter", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>& aux) {
    const int root = (count * 2 + 1) % w.n();
    aux = {root};
    fill(in, w.n(), count, w.n());
    for (int r = 0; r < w.n(); ++r) {
      out[r].assign(count, -1);
      w.issue(r, coll(OpKind::Scatter, in[r].data(), out[r].data(), count, root));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>& aux) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[r][i], input(aux[0], r * count + i)) << "rank " << r;
  });
}

// A group of transfers: every rank sends to the next three ranks and
// receives from the previous three (sends issued first on even ranks,
// receives first on odd ones), each message with its own contents.
TEST(PlanPlay, SendRecvGroups) {
  playAll("send/recv group", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>&) {
    const int n = w.n(), k = std::min(3, n - 1);
    fill(in, n, count, std::max(k, 1));
    for (int r = 0; r < n; ++r) {
      out[r].assign(count * std::max(k, 1), -1);
      std::vector<CollArgs> sends, recvs;
      for (int j = 1; j <= k; ++j) {
        sends.push_back(coll(OpKind::Send, in[r].data() + (j - 1) * count, nullptr, count, (r + j) % n));
        recvs.push_back(coll(OpKind::Recv, nullptr, out[r].data() + (j - 1) * count, count, (r - j + n) % n));
      }
      for (const CollArgs& a : r % 2 ? recvs : sends) w.issue(r, a);
      for (const CollArgs& a : r % 2 ? sends : recvs) w.issue(r, a);
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
    const int k = std::min(3, n - 1);
    for (int r = 0; r < n; ++r)
      for (int j = 1; j <= k; ++j)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(out[r][(j - 1) * count + i], input((r - j + n) % n, (j - 1) * count + i))
              << "rank " << r << " from " << (r - j + n) % n;
  });
}

// Operations back to back on the same streams: barrier, allreduce,
// broadcast, barrier, allgather; the stream positions carry across them.
TEST(PlanPlay, SequenceWithBarriers) {
  playAll("barrier sequence", [](World& w, int count, Bufs& in, Bufs& out, std::vector<int32_t>&) {
    const int n = w.n();
    fill(in, n, count);
    for (int r = 0; r < n; ++r) {
      out[r].assign(count * (2 + n), -1);
      w.issue(r, coll(OpKind::Barrier, nullptr, nullptr, 1));
      w.issue(r, coll(OpKind::AllReduce, in[r].data(), out[r].data(), count));
      w.issue(r, coll(OpKind::Broadcast, in[r].data(), out[r].data() + count, count, n - 1));
      w.issue(r, coll(OpKind::Barrier, nullptr, nullptr, 1));
      w.issue(r, coll(OpKind::AllGather, in[r].data(), out[r].data() + 2 * count, count));
    }
  }, [](int n, size_t count, const Bufs& out, const std::vector<int32_t>&) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[r][i], sumAt(n, i));
        ASSERT_EQ(out[r][count + i], input(n - 1, i));
        for (int q = 0; q < n; ++q) ASSERT_EQ(out[r][(2 + q) * count + i], input(q, i));
      }
  });
}

// A rank's own block is a step of the plan (neither sent nor received), not
// a copy made while planning: it comes after every send, so the peers'
// blocks leave first, and before every receive.  All-to-all, a gather's and a
// scatter's root, 2-4 ranks, blocks in one program (below the threshold) and
// in a program each (above it); in place it is no step at all.
TEST(PlanPlay, OwnBlockIsCopiedAfterTheSends) {
  Config cfg{};
  cfg.chunkBytes = 1024;
  cfg.fifoBytes = 64 << 10;
  cfg.smallBytes = 1024;
  const int me = 1;
  for (int n = 2; n <= 4; ++n) {
    std::vector<int> ring(n);
    std::iota(ring.begin(), ring.end(), 0);
    std::vector<std::unique_ptr<SimConn>> owned;
    LevelConns conns;
    conns.made.reset(new std::atomic<Conn*>[n]);
    for (int p = 0; p < n; ++p) {
      owned.push_back(std::make_unique<SimConn>(me, p, false));
      conns.made[p] = owned.back().get();
    }
    PlanCtx x;
    x.rank = me;
    x.nranks = n;
    x.ring = x.ringPos = &ring;
    x.conns = &conns;
    x.cfg = &cfg;
    x.mem = memOps(MemType::Host);
    for (size_t count : {size_t(16), size_t(4096)})  // 64 B blocks: one program; 16 KiB: one each
      for (OpKind kind : {OpKind::AllToAll, OpKind::Gather, OpKind::Scatter})
        for (bool inPlace : {false, true}) {
          std::vector<int32_t> src(count * n, 7), dst(count * n, -1);
          const size_t mine = (kind == OpKind::Scatter ? 0 : me) * count;
          // In place: all-to-all's buffers are one; a gather's root sends from
          // inside its recvbuff, a scatter's root receives inside its sendbuff.
          int32_t *s = src.data(), *d = dst.data();
          if (inPlace && kind == OpKind::Scatter) d = src.data() + me * count;
          if (inPlace && kind != OpKind::Scatter) s = dst.data() + (kind == OpKind::Gather ? me * count : 0);
          Phase ph;
          bool more = false;
          ASSERT_EQ(makeTask(coll(kind, s, d, count, me))->next(x, &ph, &more), ternSuccess);
          const std::string what = std::string(collectiveKind(kind).name) + " at " + std::to_string(n) +
                                   " ranks, count " + std::to_string(count) + (inPlace ? ", in place" : "");
          EXPECT_EQ(ph.progs.size() == 1, count == 16) << what;
          if (!inPlace)
            EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](int32_t v) { return v == -1; }))
                << what << ": data moved while planning";
          int localAt = -1, lastSend = -1, firstRecv = 1 << 30, at = 0, locals = 0;
          for (const Program& p : ph.progs)
            for (const Step& st : p.steps) {
              if (!st.in && !st.out) {
                localAt = at;
                ++locals;
                EXPECT_EQ(st.dst, reinterpret_cast<char*>(d + mine)) << what;
                EXPECT_EQ(st.bytes, count * sizeof(int32_t)) << what;
                EXPECT_FALSE(st.direct) << what;
              }
              if (st.out) lastSend = at;
              if (st.in && st.bytes > 0) firstRecv = std::min(firstRecv, at);
              ++at;
            }
          // A large in-place all-to-all sends from a staging copy: its own
          // block is copied back from there like any other.
          const bool copies = !inPlace || (kind == OpKind::AllToAll && count > 16);
          EXPECT_EQ(locals, copies ? 1 : 0) << what;
          if (copies) {
            EXPECT_GT(localAt, lastSend) << what;
            EXPECT_LT(localAt, firstRecv) << what;
          }
        }
  }
}

// The checker itself: plans that do not meet are caught (so a pass means
// something).  Ranks that disagree on the count, a rank that skips an
// operation, and a root disagreement.
TEST(PlanPlay, CatchesMismatchesAndDeadlocks) {
  const Config4 k{64, 256, 64, 0};
  {
    World w(3, k, 7);
    std::vector<int32_t> a(100), b(100);
    for (int r = 0; r < 3; ++r)
      w.issue(r, coll(OpKind::AllReduce, a.data(), b.data(), r == 1 ? 99 : 100));
    EXPECT_NE(w.run(), "");
  }
  {
    World w(4, k, 8);
    std::vector<int32_t> a(8), b(8);
    for (int r = 0; r < 4; ++r)
      if (r != 2) w.issue(r, coll(OpKind::AllReduce, a.data(), b.data(), 8));
    std::string err = w.run();
    EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
  }
  {
    World w(4, k, 9);
    std::vector<int32_t> a(40), b(40);
    for (int r = 0; r < 4; ++r) w.issue(r, coll(OpKind::Broadcast, a.data(), b.data(), 40, r == 0 ? 1 : 0));
    EXPECT_NE(w.run(), "");
  }
  {  // a send nobody receives: left unread
    World w(2, k, 10);
    std::vector<int32_t> a(4);
    w.issue(0, coll(OpKind::Send, a.data(), nullptr, 4, 1));
    std::string err = w.run();
    EXPECT_NE(err.find("1 messages sent, 0 received"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace tern
