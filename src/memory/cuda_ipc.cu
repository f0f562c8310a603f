#include "memory/cuda_ipc.h"

#include <cuda.h>  // types only: the driver function comes from the runtime
#include <cuda_runtime.h>

#include <cstring>

#include "memory/cuda_runtime_probe.h"
#include "memory/memory.h"

namespace tern {

namespace {

using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// cudaIpcGetMemHandle wants an allocation's base; the runtime has no call
// that finds it, the driver's cuMemGetAddressRange does.
AddressRange addressRange() {
  static const auto fn = reinterpret_cast<AddressRange>(driverFunction("cuMemGetAddressRange"));
  return fn;
}

}  // namespace

bool exportCudaBuffer(const void* p, IpcHandle* h, uint64_t* offset) {
  AddressRange range = addressRange();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!range || range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return false;
  cudaIpcMemHandle_t mh;
  if (cudaIpcGetMemHandle(&mh, reinterpret_cast<void*>(base)) != cudaSuccess) {
    cudaGetLastError();  // memory of a pool or of VMM: the caller stages instead
    return false;
  }
  static_assert(sizeof mh <= sizeof h->data, "CUDA's handle fits");
  *h = IpcHandle{};
  h->type = static_cast<uint32_t>(MemType::Cuda);
  cudaGetDevice(&h->device);
  h->size = size;
  memcpy(h->data, &mh, sizeof mh);
  *offset = reinterpret_cast<CUdeviceptr>(p) - base;
  return true;
}

void* openCudaBuffer(const IpcHandle& h, std::string* why) {
  if (h.type != static_cast<uint32_t>(MemType::Cuda)) {
    *why = "the peer's buffer is not CUDA memory";
    return nullptr;
  }
  cudaIpcMemHandle_t mh;
  memcpy(&mh, h.data, sizeof mh);
  void* p = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("cudaIpcOpenMemHandle failed (the peer's device ") +
           std::to_string(h.device) + "): " + cudaGetErrorString(e);
    return nullptr;
  }
  return p;
}

void closeCudaBuffer(const IpcHandle&, void* base) {
  cudaPointerAttributes a;
  int prev = -1;
  if (cudaPointerGetAttributes(&a, base) == cudaSuccess && cudaGetDevice(&prev) == cudaSuccess &&
      a.device != prev)
    cudaSetDevice(a.device);
  cudaIpcCloseMemHandle(base);
  if (prev >= 0 && a.device != prev) cudaSetDevice(prev);
  cudaGetLastError();
}

}  // namespace tern
