#include <cuda.h>  // types only: the driver function comes from the runtime
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "memory/cuda_runtime_probe.h"
#include "memory/stream_hold.h"

namespace tern {

namespace {

constexpr uint32_t kSlots = 1024;

// One mapped pinned page of flags and the free slots, for the process.
struct FlagPage {
  volatile uint32_t* host = nullptr;
  uint32_t* dev = nullptr;
  std::mutex m;
  std::vector<uint32_t> freeSlots;

  FlagPage() {
    void* h = nullptr;
    if (cudaHostAlloc(&h, kSlots * 4, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
        cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), h, 0) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    host = static_cast<volatile uint32_t*>(h);
    for (uint32_t i = 0; i < kSlots; ++i) host[i] = 0, freeSlots.push_back(kSlots - 1 - i);
  }
};

FlagPage& flags() {
  static FlagPage* page = new FlagPage;  // never freed: see pinnedStagingPool
  return *page;
}

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

WaitValue32 waitValue32() {
  static const auto fn = reinterpret_cast<WaitValue32>(driverFunction("cuStreamWaitValue32"));
  return fn;
}

// The fallback: one thread polls the flag (sleeping between reads).
__global__ void waitFlag(const volatile uint32_t* flag, uint32_t target) {
  while (static_cast<int32_t>(*flag - target) < 0) __nanosleep(2000);
}

}  // namespace

std::unique_ptr<StreamHold> StreamHold::make() {
  if (!cudaUsable()) return nullptr;
  FlagPage& f = flags();
  std::lock_guard<std::mutex> lk(f.m);
  if (!f.host || f.freeSlots.empty()) return nullptr;
  uint32_t slot = f.freeSlots.back();
  f.freeSlots.pop_back();
  return std::unique_ptr<StreamHold>(new StreamHold(slot));
}

StreamHold::~StreamHold() {
  if (held_) release();
  FlagPage& f = flags();
  std::lock_guard<std::mutex> lk(f.m);
  f.freeSlots.push_back(slot_);
}

int StreamHold::hold(void* stream) {
  if (held_) return 0;  // later work already waits behind the first hold
  FlagPage& f = flags();
  target_ = f.host[slot_] + 1;  // values only grow: older waits stay satisfied
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int e = CUDA_ERROR_NOT_SUPPORTED;
  if (WaitValue32 fn = waitValue32())  // a device without stream memory operations refuses it
    e = fn(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(f.dev + slot_), target_,
           CU_STREAM_WAIT_VALUE_GEQ);
  if (e != 0) {
    waitFlag<<<1, 1, 0, s>>>(f.dev + slot_, target_);
    e = cudaGetLastError();
  }
  held_ = e == 0;
  return e;
}

void StreamHold::release() {
  if (!held_) return;
  __atomic_store_n(const_cast<uint32_t*>(flags().host + slot_), target_, __ATOMIC_RELEASE);
  held_ = false;
}

}  // namespace tern
