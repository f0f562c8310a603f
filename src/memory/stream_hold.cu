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
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

WaitValue32 waitValue32() {
  static const auto fn = reinterpret_cast<WaitValue32>(driverFunction("cuStreamWaitValue32"));
  return fn;
}

WriteValue32 writeValue32() {
  static const auto fn = reinterpret_cast<WriteValue32>(driverFunction("cuStreamWriteValue32"));
  return fn;
}

// The fallbacks where a device refuses stream memory operations: one thread
// polls the flag (sleeping between reads), or writes it.
__global__ void waitFlag(const volatile uint32_t* flag, uint32_t target) {
  while (static_cast<int32_t>(*flag - target) < 0) __nanosleep(2000);
}

__global__ void writeFlag(volatile uint32_t* flag, uint32_t v) {
  __threadfence_system();  // the copies before it are visible first
  *flag = v;
}

}  // namespace

bool takeStreamFlag(uint32_t* slot) {
  if (!cudaUsable()) return false;
  FlagPage& f = flags();
  std::lock_guard<std::mutex> lk(f.m);
  if (!f.host || f.freeSlots.empty()) return false;
  *slot = f.freeSlots.back();
  f.freeSlots.pop_back();
  return true;
}

void giveBackStreamFlag(uint32_t slot) {
  FlagPage& f = flags();
  std::lock_guard<std::mutex> lk(f.m);
  f.freeSlots.push_back(slot);
}

volatile uint32_t* streamFlag(uint32_t slot) { return flags().host + slot; }

int streamWaitFlag(void* stream, uint32_t slot, uint32_t v) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint32_t* dev = flags().dev + slot;
  int e = CUDA_ERROR_NOT_SUPPORTED;
  if (WaitValue32 fn = waitValue32())  // a device without stream memory operations refuses it
    e = fn(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(dev), v, CU_STREAM_WAIT_VALUE_GEQ);
  if (e != 0) {
    waitFlag<<<1, 1, 0, s>>>(dev, v);
    e = cudaGetLastError();
  }
  return e;
}

int streamWriteFlag(void* stream, uint32_t slot, uint32_t v) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint32_t* dev = flags().dev + slot;
  int e = CUDA_ERROR_NOT_SUPPORTED;
  if (WriteValue32 fn = writeValue32())
    e = fn(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(dev), v, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (e != 0) {
    writeFlag<<<1, 1, 0, s>>>(dev, v);
    e = cudaGetLastError();
  }
  return e;
}

std::unique_ptr<StreamHold> StreamHold::make() {
  uint32_t slot;
  return takeStreamFlag(&slot) ? std::unique_ptr<StreamHold>(new StreamHold(slot)) : nullptr;
}

StreamHold::~StreamHold() {
  if (held_) release();
  giveBackStreamFlag(slot_);
}

int StreamHold::hold(void* stream) {
  if (held_) return 0;  // later work already waits behind the first hold
  target_ = flags().host[slot_] + 1;  // values only grow: older waits stay satisfied
  const int e = streamWaitFlag(stream, slot_, target_);
  held_ = e == 0;
  return e;
}

void StreamHold::release() {
  if (!held_) return;
  __atomic_store_n(const_cast<uint32_t*>(flags().host + slot_), target_, __ATOMIC_RELEASE);
  held_ = false;
}

}  // namespace tern
