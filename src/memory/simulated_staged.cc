// The simulated device's side of staged calls (staged.h), so CI runs the
// staged path with no GPU: copies are work on the caller's simulated stream,
// a flag write is work that stores, a flag wait is work that polls (the
// stream's thread blocks there, as a GPU stream waits on
// cuStreamWaitValue32), and "pinned" memory is ordinary host memory.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "memory/simulated.h"
#include "memory/staged.h"

namespace tern {
namespace sim {

namespace {

constexpr uint32_t kSlots = 1024;

class SimStaged : public StagedDevice {
 public:
  SimStaged() : pool_({[](size_t n) { return malloc(n); }, free}) {
    for (uint32_t i = 0; i < kSlots; ++i) free_.push_back(kSlots - 1 - i);
  }
  int toHost(void* host, const void* dev, size_t bytes, void* stream) const override {
    memcpyAsync(static_cast<Stream*>(stream), host, dev, bytes);
    return 0;
  }
  int toDevice(void* dev, const void* host, size_t bytes, void* stream) const override {
    memcpyAsync(static_cast<Stream*>(stream), dev, host, bytes);
    return 0;
  }
  int deviceToDevice(void* dst, const void* src, size_t bytes, void* stream) const override {
    memcpyAsync(static_cast<Stream*>(stream), dst, src, bytes);
    return 0;
  }
  int writeFlag(uint32_t slot, uint32_t v, void* stream) const override {
    std::atomic<uint32_t>* f = &flags_[slot];
    enqueue(static_cast<Stream*>(stream), [f, v] { f->store(v, std::memory_order_release); });
    return 0;
  }
  int waitFlag(uint32_t slot, uint32_t v, void* stream) const override {
    std::atomic<uint32_t>* f = &flags_[slot];
    enqueue(static_cast<Stream*>(stream), [f, v] {
      while (static_cast<int32_t>(f->load(std::memory_order_acquire) - v) < 0)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
    return 0;
  }
  uint32_t flag(uint32_t slot) const override { return flags_[slot].load(std::memory_order_acquire); }
  void setFlag(uint32_t slot, uint32_t v) const override {
    flags_[slot].store(v, std::memory_order_release);
  }
  bool takeFlag(uint32_t* slot) const override {
    std::lock_guard<std::mutex> lk(m_);
    if (free_.empty()) return false;
    *slot = free_.back();
    free_.pop_back();
    return true;
  }
  void giveBackFlag(uint32_t slot) const override {
    std::lock_guard<std::mutex> lk(m_);
    free_.push_back(slot);
  }
  StagingPool* pinned() const override { return &pool_; }
  std::string error(int code) const override { return "simulated device error " + std::to_string(code); }
  bool capturing(void* stream) const override { return sim::capturing(static_cast<Stream*>(stream)); }
  int hostNode(void (*fn)(void*), void* arg, void* stream) const override {
    enqueue(static_cast<Stream*>(stream), [fn, arg] { fn(arg); });
    return 0;
  }
  int keepWithGraph(void* stream, void (*destroy)(void*), void* obj) const override {
    if (!sim::capturing(static_cast<Stream*>(stream))) return 1;
    sim::keepWithGraph(static_cast<Stream*>(stream), [destroy, obj] { destroy(obj); });
    return 0;
  }

 private:
  mutable std::atomic<uint32_t> flags_[kSlots] = {};
  mutable std::mutex m_;
  mutable std::vector<uint32_t> free_;
  mutable StagingPool pool_;
};

}  // namespace

const StagedDevice* stagedDevice() {
  static const SimStaged* dev = new SimStaged;  // never freed: streams outlive statics
  return enabled() ? dev : nullptr;
}

}  // namespace sim
}  // namespace tern
