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
  int deviceToDevice(void* dst, const void* src, size_t bytes, void* stream) const override {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
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
  // Allocating while a stream is captured in the global mode (PyTorch's
  // default) is refused unless this thread relaxes it, as NCCL does.
  StagingPool::Buffer borrowPinned(size_t bytes) const override {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    StagingPool::Buffer b = pinnedStagingPool()->borrow(bytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    return b;
  }
  bool capturing(void* stream) const override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st) != cudaSuccess) cudaGetLastError();
    return st == cudaStreamCaptureStatusActive;
  }
  int hostNode(void (*fn)(void*), void* arg, void* stream) const override {
    return cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), fn, arg);
  }
  int keepWithGraph(void* stream, void (*destroy)(void*), void* obj) const override {
    cudaStreamCaptureStatus st;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &st, nullptr, &graph);
    if (e != cudaSuccess || !graph) return e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated;
    cudaUserObject_t uo;
    // No sync: the destructor runs on CUDA's thread, and only gives buffers back.
    e = cudaUserObjectCreate(&uo, obj, destroy, 1, cudaUserObjectNoDestructorSync);
    if (e != cudaSuccess) return e;
    return cudaGraphRetainUserObject(graph, uo, 1, cudaGraphUserObjectMove);
  }
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
