// CUDA's side of staged calls (staged.h): async copies between the caller's
// device buffers and pinned memory, and the mapped flags of stream_hold.cu,
// all enqueued on the caller's stream by the caller's thread.
#include <cuda_runtime.h>

#include "memory/cuda_runtime_probe.h"
#include "memory/staged.h"
#include "memory/stream_hold.h"

namespace tern {

namespace {

class CudaStaged : public StagedDevice {
 public:
  int toHost(void* host, const void* dev, size_t bytes, void* stream) const override {
    return cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream));
  }
  int toDevice(void* dev, const void* host, size_t bytes, void* stream) const override {
    return cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
  }
  int writeFlag(uint32_t slot, uint32_t v, void* stream) const override {
    return streamWriteFlag(stream, slot, v);
  }
  int waitFlag(uint32_t slot, uint32_t v, void* stream) const override {
    return streamWaitFlag(stream, slot, v);
  }
  uint32_t flag(uint32_t slot) const override {
    return __atomic_load_n(const_cast<uint32_t*>(streamFlag(slot)), __ATOMIC_ACQUIRE);
  }
  void setFlag(uint32_t slot, uint32_t v) const override {
    __atomic_store_n(const_cast<uint32_t*>(streamFlag(slot)), v, __ATOMIC_RELEASE);
  }
  bool takeFlag(uint32_t* slot) const override { return takeStreamFlag(slot); }
  void giveBackFlag(uint32_t slot) const override { giveBackStreamFlag(slot); }
  StagingPool* pinned() const override { return pinnedStagingPool(); }
  std::string error(int code) const override {
    return cudaGetErrorString(static_cast<cudaError_t>(code));
  }
};

}  // namespace

const StagedDevice* cudaStagedDevice() {
  static const CudaStaged dev;
  return cudaUsable() ? &dev : nullptr;
}

}  // namespace tern
