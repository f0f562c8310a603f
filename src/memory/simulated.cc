#include "memory/simulated.h"

#include <sys/mman.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/ternary_cpu.h"
#include "memory/host_reduce.h"

namespace tern {
namespace sim {

namespace {

constexpr size_t kSpan = size_t(1) << 30;  // address space only (MAP_NORESERVE)

// The device's address range (no access) and the bytes behind it.
struct Space {
  char* dev = nullptr;
  char* back = nullptr;
  std::atomic<size_t> used{0};
};
Space gSpace;

void* reserve(int prot) {
  void* p = mmap(nullptr, kSpan, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

class Stream {
 public:
  Stream() : t_([this] { loop(); }) { t_.detach(); }  // lives as long as the process

  uint64_t enqueue(std::function<void()> w) {
    std::lock_guard<std::mutex> lk(m_);
    q_.push_back(std::move(w));
    cv_.notify_all();
    return ++enqueued_;
  }
  uint64_t record() {
    std::lock_guard<std::mutex> lk(m_);
    return enqueued_;
  }
  bool reached(uint64_t ev) {
    std::lock_guard<std::mutex> lk(m_);
    return completed_ >= ev;
  }
  void waitFor(uint64_t ev) {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return completed_ >= ev; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> w;
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return !q_.empty(); });
        w = std::move(q_.front());
        q_.pop_front();
      }
      w();
      std::lock_guard<std::mutex> lk(m_);
      ++completed_;
      cv_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t enqueued_ = 0, completed_ = 0;
  std::thread t_;
};

void enable() {
  if (gSpace.dev) return;
  gSpace.back = static_cast<char*>(reserve(PROT_READ | PROT_WRITE));
  gSpace.dev = static_cast<char*>(reserve(PROT_NONE));
}

bool enabled() { return gSpace.dev != nullptr; }

bool owns(const void* p) {
  const char* c = static_cast<const char*>(p);
  return gSpace.dev && c >= gSpace.dev && c < gSpace.dev + kSpan;
}

void* alloc(size_t bytes) {
  if (!gSpace.dev || !gSpace.back) return nullptr;
  const size_t n = (bytes + 255) / 256 * 256 + 256;  // a gap: overruns land in no buffer
  const size_t at = gSpace.used.fetch_add(n);
  return at + n <= kSpan ? gSpace.dev + at : nullptr;
}

void* resolve(const void* p) {
  if (!owns(p)) return const_cast<void*>(p);
  return gSpace.back + (static_cast<const char*>(p) - gSpace.dev);
}

Stream* newStream() { return new Stream; }
void enqueue(Stream* s, std::function<void()> work) { s->enqueue(std::move(work)); }
void synchronize(Stream* s) { s->waitFor(s->record()); }

void memcpyAsync(Stream* s, void* dst, const void* src, size_t bytes) {
  s->enqueue([=] { memcpy(resolve(dst), resolve(src), bytes); });
}

namespace {

// Work streams, reused across operations (threads are not cheap).
std::mutex gPoolMu;
std::vector<Stream*> gPool;

Stream* borrowStream() {
  std::lock_guard<std::mutex> lk(gPoolMu);
  if (gPool.empty()) return new Stream;
  Stream* s = gPool.back();
  gPool.pop_back();
  return s;
}

void giveBackStream(Stream* s) {
  std::lock_guard<std::mutex> lk(gPoolMu);
  gPool.push_back(s);
}

template <class T>
T* at(T* p) {
  return static_cast<T*>(resolve(p));
}

TernaryInput resolved(TernaryInput in) {
  in.g = resolve(in.g);
  in.scales = at(in.scales);
  return in;
}

class SimOps : public MemOps {
 public:
  explicit SimOps(Stream* user) : user_(user), s_(borrowStream()) {}
  ~SimOps() override {
    end();
    // The stream goes back once its last work has run (on a failure path
    // that may be later than now).
    Stream* s = s_;
    s_->enqueue([s] { giveBackStream(s); });
  }

  MemType type() const override { return MemType::Simulated; }
  void* stream() const override { return s_; }

  void begin() const override {
    if (hold_) return;
    Stream* user = user_;
    earlier_ = user->record();
    const uint64_t earlier = earlier_;
    s_->enqueue([user, earlier] { user->waitFor(earlier); });
    hold_ = std::make_shared<Latch>();
    std::shared_ptr<Latch> h = hold_;
    user->enqueue([h] { h->wait(); });
  }
  bool ready() const override { return user_->reached(earlier_); }
  void end() const override {
    if (hold_) hold_->release();
  }
  uint64_t fence() const override { return s_->record(); }
  bool done(uint64_t f) const override { return s_->reached(f); }

  void copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes) memcpyAsync(s_, dst, src, bytes);
  }
  void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
              ternRedOp_t op, int avgDivisor) const override {
    s_->enqueue([=] { reduceKernel(resolve(dst), resolve(a), resolve(b), count, dt, op, avgDivisor); });
  }
  void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const override {
    s_->enqueue([=] { divideKernel(resolve(buf), count, dt, divisor); });
  }
  // The codec: the CPU's kernels, run on the stream on the bytes behind the
  // addresses (so the codes are the CPU codec's, as CUDA's are bit for bit).
  const TernaryKernels& ternary() const override { return ternaryKernels(); }
  void ternaryEncode(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) const override {
    s_->enqueue([=] { ternaryKernels().encode(resolved(in), g0, n, at(out)); });
  }
  void ternaryAddEncode(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes,
                        int win, uint32_t* out, int wout) const override {
    s_->enqueue([=] {
      ternaryKernels().addEncode(resolved(in), g0, n, at(planes), win, at(out), wout);
    });
  }
  void ternaryDecode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                     uint32_t block, size_t count, ternDataType_t dt, int avgN,
                     void* dst) const override {
    s_->enqueue([=] {
      ternaryKernels().decode(at(planes), w, g0, n, at(scales), block, count, dt, avgN,
                              resolve(dst));
    });
  }
  void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                         float* maxAbs, float* sumSq) const override {
    s_->enqueue([=] { tern::ternaryBlockStats(resolve(g), dt, count, block, at(maxAbs), at(sumSq)); });
  }
  void ternaryCorrect(const void* g, ternDataType_t dt, const float* residual, size_t count,
                      float* out) const override {
    s_->enqueue([=] {
      const void* h = resolve(g);
      const float* r = at(residual);
      float* o = at(out);
      for (size_t i = 0; i < count; ++i) o[i] = ternaryLoad(h, dt, i) + r[i];
    });
  }

 private:
  Stream* user_;
  Stream* s_;
  mutable std::shared_ptr<Latch> hold_;
  mutable uint64_t earlier_ = 0;
};

}  // namespace

std::unique_ptr<MemOps> makeOps(void* stream) {
  if (!stream || !gSpace.dev) return nullptr;
  return std::make_unique<SimOps>(static_cast<Stream*>(stream));
}

}  // namespace sim
}  // namespace tern
