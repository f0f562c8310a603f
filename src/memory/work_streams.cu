#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "memory/work_streams.h"

namespace tern {

namespace {

// Handles given back, per device: the next borrower on that device takes
// one instead of making a new one.
template <class T>
class DeviceSpares {
 public:
  bool take(int dev, T* out) {
    std::lock_guard<std::mutex> lk(m_);
    std::vector<T>& v = spare_[dev];
    if (v.empty()) return false;
    *out = v.back();
    v.pop_back();
    return true;
  }
  void giveBack(int dev, T h) {
    std::lock_guard<std::mutex> lk(m_);
    spare_[dev].push_back(h);
  }

 private:
  std::mutex m_;
  std::map<int, std::vector<T>> spare_;
};

DeviceSpares<cudaStream_t>& streams() {
  static auto* s = new DeviceSpares<cudaStream_t>;  // never freed: see pinnedStagingPool
  return *s;
}

DeviceSpares<cudaEvent_t>& events() {
  static auto* s = new DeviceSpares<cudaEvent_t>;
  return *s;
}

// The calling thread's device (operations give back on the thread and
// device they ran on); -1 when it has none.
int device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

}  // namespace

void* borrowWorkStream() {
  const int dev = device();
  if (dev < 0) return nullptr;
  cudaStream_t s = nullptr;
  if (streams().take(dev, &s)) return s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return s;
}

void giveBackWorkStream(void* stream) {
  if (stream) streams().giveBack(device(), static_cast<cudaStream_t>(stream));
}

int borrowEvent(void** event) {
  cudaEvent_t e = nullptr;
  cudaError_t r = events().take(device(), &e) ? cudaSuccess
                                              : cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  *event = e;
  return r;
}

void giveBackEvent(void* event) {
  if (event) events().giveBack(device(), static_cast<cudaEvent_t>(event));
}

}  // namespace tern
