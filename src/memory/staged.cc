// Staged calls (staged.h): the host's memory operations on pinned copies of
// the buffers, and the device side enqueued by begin() on the caller's
// thread.
#include "memory/staged.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace tern {

namespace {

// Two flags per call. The stream writes `ready` (the inputs are in pinned
// memory), later `free` (the copy back is done), and the host only reads
// it; the host writes `done` and the stream only waits on it. So each flag
// has one writer and its values only grow: were the host to set a flag the
// stream also writes, a failed call ended before its stream got there would
// see the stream write a smaller value and wait on it forever.
struct Flags {
  uint32_t in = 0, out = 0;  // slots: stream-written, host-written
  uint32_t ready = 0, free = 0, done = 0;
};

// A call's pinned buffers and flags, kept until its stream has set `free`.
struct Retired {
  const StagedDevice* dev;
  StagingPool::Buffer in, out;
  Flags f;
};
std::atomic<size_t> gStagedCalls{0};
std::mutex gRetiredMu;
std::vector<Retired>* gRetired = new std::vector<Retired>;  // never freed: streams outlive statics

bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void giveBack(const Retired& r) {
  if (r.in.p) r.dev->pinned()->giveBack(r.in);
  if (r.out.p) r.dev->pinned()->giveBack(r.out);
  r.dev->giveBackFlag(r.f.in);
  r.dev->giveBackFlag(r.f.out);
}

// What every stream has finished with goes back to its pools.
void sweep() {
  std::lock_guard<std::mutex> lk(gRetiredMu);
  auto& v = *gRetired;
  auto kept = std::partition(v.begin(), v.end(), [](const Retired& r) {
    return !reached(r.dev->flag(r.f.in), r.f.free);
  });
  for (auto it = kept; it != v.end(); ++it) giveBack(*it);
  v.erase(kept, v.end());
}

class StagedOps : public MemOps {
 public:
  // `owned`: the pinned buffers and flags go back after this call (a
  // captured call's belong to its graph, and its flag values are fixed).
  StagedOps(const StagedDevice& dev, void* stream, const StagedBuffers& user, Retired pinned,
            void* pinIn, void* pinOut, bool owned = true)
      : dev_(dev), stream_(stream), user_(user), pinned_(pinned), pinIn_(pinIn), pinOut_(pinOut),
        owned_(owned) {}
  ~StagedOps() override {
    end();  // a failed call still lets its stream go on
    if (!owned_) return;
    std::lock_guard<std::mutex> lk(gRetiredMu);
    gRetired->push_back(pinned_);
  }

  // The caller's thread, in the stream's order: inputs out to pinned
  // memory, then `ready`.
  void follow() const override {
    Flags& f = pinned_.f;
    f.ready = dev_.flag(f.in) + 1;
    f.free = f.ready + 1;
    f.done = dev_.flag(f.out) + 1;
    enqueueInputs();
  }
  void enqueueInputs() const {
    if (user_.srcBytes) enqueued(dev_.toHost(pinIn_, user_.src, user_.srcBytes, stream_));
    enqueued(dev_.writeFlag(pinned_.f.in, pinned_.f.ready, stream_));
  }
  bool ready() const override { return err_ || reached(dev_.flag(pinned_.f.in), pinned_.f.ready); }
  // Later work waits for `done`, after the results' copy back.
  void hold() const override {
    const Flags& f = pinned_.f;
    enqueued(dev_.waitFlag(f.out, f.done, stream_));
    if (user_.dstBytes) enqueued(dev_.toDevice(user_.dst, pinOut_, user_.dstBytes, stream_));
    enqueued(dev_.writeFlag(f.in, f.free, stream_));
  }
  void end() const override {
    if (ended_) return;
    ended_ = true;
    dev_.setFlag(pinned_.f.out, pinned_.f.done);
  }
  ternResult_t error() const override { return err_ ? ternUnhandledCudaError : ternSuccess; }
  int failure() const { return err_; }
  const char* lastError() const override { return why_.c_str(); }

  // Everything else: host memory.
  MemType type() const override { return MemType::Host; }
  void copy(void* dst, const void* src, size_t bytes) const override { host().copy(dst, src, bytes); }
  void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
              ternRedOp_t op, int avgDivisor) const override {
    host().reduce(dst, a, b, count, dt, op, avgDivisor);
  }
  void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const override {
    host().divide(buf, count, dt, divisor);
  }
  void scale(void* dst, const void* src, size_t count, ternDataType_t dt,
             const void* scalar) const override {
    host().scale(dst, src, count, dt, scalar);
  }
  const TernaryKernels& ternary() const override { return host().ternary(); }
  void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                         float* maxAbs, float* sumSq) const override {
    host().ternaryBlockStats(g, dt, count, block, maxAbs, sumSq);
  }
  std::shared_ptr<float> persistentZeros(size_t count) const override {
    return host().persistentZeros(count);
  }

 private:
  static const MemOps& host() { return *memOps(MemType::Host); }
  void enqueued(int code) const {
    if (code == 0 || err_) return;
    err_ = code;
    why_ = "staging on the caller's stream failed: " + dev_.error(code);
  }

  const StagedDevice& dev_;
  void* stream_;
  StagedBuffers user_;
  mutable Retired pinned_;
  void* pinIn_;
  void* pinOut_;
  bool owned_;
  mutable int err_ = 0;
  mutable std::string why_;
  mutable bool ended_ = false;
};

bool overlap(const char* a, size_t na, const char* b, size_t nb) { return a < b + nb && b < a + na; }

// Flag slots and pinned copies of b's buffers into *r, *pinIn, *pinOut.
bool reserve(const StagedDevice& dev, const StagedBuffers& b, Retired* r, void** pinIn, void** pinOut,
             std::string* why) {
  sweep();
  if (!dev.pinned()) return *why = "no pinned memory", false;
  *r = Retired{&dev, {}, {}, {}};
  if (!dev.takeFlag(&r->f.in)) return *why = "every stream flag is taken", false;
  if (!dev.takeFlag(&r->f.out)) {
    dev.giveBackFlag(r->f.in);
    return *why = "every stream flag is taken", false;
  }
  const char* s = static_cast<const char*>(b.src);
  char* d = static_cast<char*>(b.dst);
  *pinIn = *pinOut = nullptr;
  if (b.srcBytes && b.dstBytes && overlap(s, b.srcBytes, d, b.dstBytes)) {
    // In place (one buffer inside the other): one pinned copy of their union.
    const char* lo = std::min<const char*>(s, d);
    const char* hi = std::max<const char*>(s + b.srcBytes, d + b.dstBytes);
    r->out = dev.borrowPinned(static_cast<size_t>(hi - lo));
    if (r->out.p) *pinIn = static_cast<char*>(r->out.p) + (s - lo), *pinOut = static_cast<char*>(r->out.p) + (d - lo);
  } else {
    if (b.srcBytes) r->in = dev.borrowPinned(b.srcBytes), *pinIn = r->in.p;
    if (b.dstBytes) r->out = dev.borrowPinned(b.dstBytes), *pinOut = r->out.p;
  }
  if ((b.srcBytes && !*pinIn) || (b.dstBytes && !*pinOut)) {
    giveBack(*r);
    return *why = "out of pinned memory", false;
  }
  return true;
}

// A call recorded in a graph: what its host node needs at each replay, and
// what the graph gives back when it is destroyed.
struct CapturedCall {
  Retired res;
  StagedBuffers user;
  void *pinIn, *pinOut;
  void* stream;
  StagedSubmit submit;
};

// The host node: the flags start over, and the engine gets the collective.
void replay(void* p) {
  auto* c = static_cast<CapturedCall*>(p);
  c->res.dev->setFlag(c->res.f.in, 0);
  c->res.dev->setFlag(c->res.f.out, 0);
  c->submit(std::make_unique<StagedOps>(*c->res.dev, c->stream, c->user, c->res, c->pinIn, c->pinOut,
                                        false));
}

// Runs on CUDA's thread when the graph goes, where no CUDA call may be
// made (the pool may free a buffer): the next sweep, on a caller's thread,
// gives them back.
void destroyCaptured(void* p) {
  auto* c = static_cast<CapturedCall*>(p);
  Retired r = c->res;
  r.f.free = r.dev->flag(r.f.in);  // reached already: nothing writes the flags any more
  delete c;
  std::lock_guard<std::mutex> lk(gRetiredMu);
  gRetired->push_back(r);
}

}  // namespace

std::unique_ptr<MemOps> makeStagedOps(const StagedDevice& dev, void* stream, StagedBuffers* b,
                                      std::string* why) {
  Retired r;
  void *pinIn, *pinOut;
  if (!reserve(dev, *b, &r, &pinIn, &pinOut, why)) return nullptr;
  auto ops = std::make_unique<StagedOps>(dev, stream, *b, r, pinIn, pinOut);
  b->src = pinIn;
  b->dst = pinOut;
  ++gStagedCalls;
  return ops;
}

bool captureStaged(const StagedDevice& dev, void* stream, StagedBuffers* b, StagedSubmit submit,
                   std::string* why) {
  auto* c = new CapturedCall{{}, *b, nullptr, nullptr, stream, std::move(submit)};
  if (!reserve(dev, *b, &c->res, &c->pinIn, &c->pinOut, why)) {
    delete c;
    return false;
  }
  c->res.f.ready = 1;  // fixed: the host node resets both flags to 0 first
  c->res.f.free = 2;
  c->res.f.done = 1;
  int e = dev.keepWithGraph(stream, destroyCaptured, c);
  if (e) {
    destroyCaptured(c);
    return *why = "the graph cannot keep the call's buffers: " + dev.error(e), false;
  }
  // Recorded in stream order: the replay's submission, the inputs, the wait
  // for the engine, the results (the same operations as hold()).
  StagedOps record(dev, stream, c->user, c->res, c->pinIn, c->pinOut, false);
  e = dev.hostNode(replay, c, stream);
  if (!e) {
    record.enqueueInputs();
    record.hold();
    e = record.failure();
  }
  record.end();  // capture time: nothing runs, the flags are reset at each replay
  if (e) return *why = "recording the call in the graph failed: " + dev.error(e), false;
  b->src = c->pinIn;
  b->dst = c->pinOut;
  ++gStagedCalls;
  return true;
}

size_t stagedCalls() { return gStagedCalls; }

size_t stagedInFlight() {
  sweep();
  std::lock_guard<std::mutex> lk(gRetiredMu);
  return gRetired->size();
}

}  // namespace tern

#ifndef TERN_WITH_CUDA
namespace tern {
const StagedDevice* cudaStagedDevice() { return nullptr; }
}  // namespace tern
#endif
