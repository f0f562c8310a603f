#include "memory/simulated.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_name.h"
#include "codec/ternary_cpu.h"
#include "memory/host_reduce.h"
#include "memory/peer_fd.h"

namespace tern {
namespace sim {

namespace {

constexpr size_t kSpan = size_t(1) << 30;  // address space only (MAP_NORESERVE)
constexpr size_t kPage = 4096;

// The device's address range (no access) and the bytes behind it: a memfd,
// so another process can map an allocation's bytes too (IPC, below).
struct Space {
  char* dev = nullptr;
  char* back = nullptr;
  int fd = -1;
  std::atomic<size_t> used{0};
  std::mutex m;
  std::map<size_t, size_t> allocs;  // offset -> bytes, for allocationOf
};
Space gSpace;
std::atomic<bool> gRefuseIpc{false};

void* reserve(int prot) {
  void* p = mmap(nullptr, kSpan, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* reserveShared(int fd) {
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(kSpan)) != 0) return nullptr;  // sparse
  void* p = mmap(nullptr, kSpan, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// A range of the device's addresses, page aligned (an allocation maps into
// another process whole); nullptr when the space is used up.
char* take(size_t bytes, size_t* at) {
  const size_t n = (bytes + kPage - 1) / kPage * kPage;
  *at = gSpace.used.fetch_add(n);
  return *at + n <= kSpan ? gSpace.dev + *at : nullptr;
}

// The simulated device's handle: the exporter's memfd and the allocation's
// place in it.
struct SimHandle {
  int64_t pid;
  int32_t fd, pad;
  uint64_t offset;
};
static_assert(sizeof(SimHandle) <= sizeof(IpcHandle::data), "fits the handle");

}  // namespace

std::shared_mutex gDriver;
std::atomic<bool> gModelDriverLock{false};

// An enqueue's hold on the modelled driver lock (modelDriverLock).
struct DriverLock {
  DriverLock() : on(gModelDriverLock.load()) {
    if (on) gDriver.lock();
  }
  ~DriverLock() {
    if (on) gDriver.unlock();
  }
  bool on;
};

struct Graph {
  std::vector<std::function<void()>> work;
  std::vector<std::function<void()>> owned;  // keepWithGraph's destructors
};

class Stream {
 public:
  Stream() : t_([this] { nameThisThread("tern-simstream"); loop(); }) { t_.detach(); }  // lives as long as the process

  uint64_t enqueue(std::function<void()> w) {
    DriverLock driver;
    std::lock_guard<std::mutex> lk(m_);
    if (capture_) {  // recorded, not run
      capture_->work.push_back(std::move(w));
      return enqueued_;
    }
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
  // Capture: enqueued work goes into the graph until it is taken back.
  Graph* capture(Graph* g) {
    std::lock_guard<std::mutex> lk(m_);
    std::swap(g, capture_);
    return g;
  }
  Graph* capturing() {
    std::lock_guard<std::mutex> lk(m_);
    return capture_;
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
  Graph* capture_ = nullptr;
  std::thread t_;
};

void enable() {
  if (gSpace.dev) return;
  gSpace.fd = static_cast<int>(syscall(SYS_memfd_create, "tern-simulated-device", MFD_CLOEXEC));
  gSpace.back = static_cast<char*>(reserveShared(gSpace.fd));
  gSpace.dev = static_cast<char*>(reserve(PROT_NONE));
}

bool enabled() { return gSpace.dev != nullptr; }

bool owns(const void* p) {
  const char* c = static_cast<const char*>(p);
  return gSpace.dev && c >= gSpace.dev && c < gSpace.dev + kSpan;
}

void* alloc(size_t bytes) {
  if (!gSpace.dev || !gSpace.back) return nullptr;
  size_t at;
  char* p = take(bytes + 256, &at);  // a gap: overruns land in no buffer
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lk(gSpace.m);
  gSpace.allocs[at] = bytes;
  return p;
}

void refuseIpc(bool refuse) { gRefuseIpc = refuse; }

bool ipcExport(const void* p, IpcHandle* h, uint64_t* offset) {
  if (!owns(p)) return false;
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - gSpace.dev);
  std::lock_guard<std::mutex> lk(gSpace.m);
  auto it = gSpace.allocs.upper_bound(off);
  if (it == gSpace.allocs.begin()) return false;
  --it;
  if (off >= it->first + it->second) return false;  // an opened peer's range, or a gap
  *h = IpcHandle{};
  h->type = static_cast<uint32_t>(MemType::Simulated);
  h->size = it->second;
  const SimHandle sh{static_cast<int64_t>(getpid()), gSpace.fd, 0, it->first};
  memcpy(h->data, &sh, sizeof sh);
  *offset = off - it->first;
  return true;
}

void* ipcOpen(const IpcHandle& h, std::string* why) {
  SimHandle sh;
  memcpy(&sh, h.data, sizeof sh);
  if (gRefuseIpc) {
    *why = "the simulated devices are set to refuse IPC (test hook)";
    return nullptr;
  }
  if (h.type != static_cast<uint32_t>(MemType::Simulated) || sh.pid == getpid() || !gSpace.dev) {
    *why = "the handle is not another process's simulated device memory";
    return nullptr;
  }
  int fd = peerFd(sh.pid, sh.fd);
  if (fd < 0) {
    *why = std::string("cannot reach process ") + std::to_string(sh.pid) + "'s device memory (" +
           strerror(errno) + ")";
    return nullptr;
  }
  size_t at;
  char* p = take(h.size, &at);
  void* m = p ? mmap(gSpace.back + at, (h.size + kPage - 1) / kPage * kPage, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(sh.offset))
              : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) {
    *why = "cannot map the peer's device memory";
    return nullptr;
  }
  return p;
}

// The range goes back to private, untouched memory (its addresses are not
// reused: the space is large and tests are short).
void ipcClose(const IpcHandle& h, void* base) {
  const size_t at = static_cast<size_t>(static_cast<char*>(base) - gSpace.dev);
  mmap(gSpace.back + at, (h.size + kPage - 1) / kPage * kPage, PROT_READ | PROT_WRITE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void* resolve(const void* p) {
  if (!owns(p)) return const_cast<void*>(p);
  return gSpace.back + (static_cast<const char*>(p) - gSpace.dev);
}

Stream* newStream() { return new Stream; }
void enqueue(Stream* s, std::function<void()> work) { s->enqueue(std::move(work)); }
void synchronize(Stream* s) {
  const uint64_t ev = s->record();
  if (!gModelDriverLock) return s->waitFor(ev);
  std::shared_lock<std::shared_mutex> driver(gDriver);  // held while blocked, as the driver's
  s->waitFor(ev);
}

void modelDriverLock(bool on) { gModelDriverLock = on; }

void beginCapture(Stream* s) { s->capture(new Graph); }
bool capturing(Stream* s) { return s->capturing() != nullptr; }
Graph* endCapture(Stream* s) { return s->capture(nullptr); }

void launchGraph(Graph* g, Stream* s) {
  for (const auto& w : g->work) s->enqueue(w);
}

void destroyGraph(Graph* g) {
  for (const auto& d : g->owned) d();
  delete g;
}

void keepWithGraph(Stream* s, std::function<void()> destroy) {
  if (Graph* g = s->capturing()) g->owned.push_back(std::move(destroy));
}

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

// Device scratch for operations (a PreMulSum's scaled input): blocks from
// alloc(), kept between operations (alloc() never frees) and lent whole.
struct Block {
  void* p;
  size_t bytes;
};
std::mutex gScratchMu;
std::vector<Block> gScratch;  // spare blocks

Block borrowScratch(size_t bytes) {
  std::lock_guard<std::mutex> lk(gScratchMu);
  for (size_t i = 0; i < gScratch.size(); ++i)
    if (gScratch[i].bytes >= bytes) {
      Block b = gScratch[i];
      gScratch.erase(gScratch.begin() + static_cast<long>(i));
      return b;
    }
  return Block{alloc(bytes), bytes};
}

void giveBackScratch(const std::vector<Block>& blocks) {
  std::lock_guard<std::mutex> lk(gScratchMu);
  for (const Block& b : blocks)
    if (b.p) gScratch.push_back(b);
}

template <class T>
T* at(T* p) {
  return static_cast<T*>(resolve(p));
}

TernaryInput resolved(TernaryInput in) {
  in.g = resolve(in.g);
  in.scales = at(in.scales);
  in.residual = at(in.residual);
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
    std::vector<Block> lent = std::move(lent_);
    s_->enqueue([s, lent] {
      giveBackScratch(lent);
      giveBackStream(s);
    });
  }

  MemType type() const override { return MemType::Simulated; }
  void* stream() const override { return s_; }

  void follow() const override {
    if (followed_) return;
    followed_ = true;
    Stream* user = user_;
    earlier_ = user->record();
    const uint64_t earlier = earlier_;
    s_->enqueue([user, earlier] { user->waitFor(earlier); });
  }
  void hold() const override {
    if (hold_) return;
    hold_ = std::make_shared<Latch>();
    std::shared_ptr<Latch> h = hold_;
    user_->enqueue([h] { h->wait(); });
  }
  bool ready() const override { return user_->reached(earlier_); }
  void end() const override {
    if (hold_) hold_->release();
  }
  uint64_t fence() const override { return s_->record(); }
  bool done(uint64_t f) const override { return s_->reached(f); }

  // Host operands count as staged where CUDA would copy them through the
  // pinned ring (cuda_ops.cu), so a test sees which path bytes took.
  void copy(void* dst, const void* src, size_t bytes) const override {
    if (!bytes) return;
    if (owns(dst) != owns(src)) countStaged(bytes);
    memcpyAsync(s_, dst, src, bytes);
  }
  void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
              ternRedOp_t op, int avgDivisor) const override {
    countStaged(count * ternTypeSize(dt) * (!owns(dst) + !owns(a) + !owns(b)));
    s_->enqueue([=] { reduceKernel(resolve(dst), resolve(a), resolve(b), count, dt, op, avgDivisor); });
  }
  bool ipcExport(const void* p, IpcHandle* h, uint64_t* offset) const override {
    return sim::ipcExport(p, h, offset);
  }
  void* ipcOpen(const IpcHandle& h, std::string* why) const override {
    return ipcAcquire(h, [&h](std::string* w) { return sim::ipcOpen(h, w); }, sim::ipcClose, why);
  }
  void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const override {
    s_->enqueue([=] { divideKernel(resolve(buf), count, dt, divisor); });
  }
  // The scalar is read when the stream gets there (a host one too, as
  // CUDA's staged copy of it would be).
  void scale(void* dst, const void* src, size_t count, ternDataType_t dt,
             const void* scalar) const override {
    s_->enqueue([=] { scaleKernel(resolve(dst), resolve(src), count, dt, resolve(scalar)); });
  }
  void* scratch(size_t bytes) const override {
    lent_.push_back(borrowScratch(bytes));
    return lent_.back().p;
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
  // Device memory (never freed, as alloc's), zeroed on the work stream.
  std::shared_ptr<float> persistentZeros(size_t count) const override {
    auto* p = static_cast<float*>(alloc(count * sizeof(float)));
    if (!p) return nullptr;
    s_->enqueue([=] { memset(at(p), 0, count * sizeof(float)); });
    return std::shared_ptr<float>(p, [](float*) {});
  }

 private:
  Stream* user_;
  Stream* s_;
  mutable std::shared_ptr<Latch> hold_;
  mutable uint64_t earlier_ = 0;
  mutable bool followed_ = false;
  mutable std::vector<Block> lent_;  // scratch, back to the spares after the last work
};

}  // namespace

std::unique_ptr<MemOps> makeOps(void* stream) {
  if (!stream || !gSpace.dev) return nullptr;
  return std::make_unique<SimOps>(static_cast<Stream*>(stream));
}

}  // namespace sim
}  // namespace tern
