#include "memory/cuda_ipc.h"

#include <cuda.h>  // types only: the driver function comes from the runtime
#include <cuda_runtime.h>

#include <cstring>

#include "memory/memory.h"

namespace tern {

namespace {

using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// cudaIpcGetMemHandle wants an allocation's base; the runtime has no call
// that finds it, the driver's cuMemGetAddressRange does (loaded through the
// runtime, as stream_hold.cu loads cuStreamWaitValue32: libtern never links
// libcuda).
AddressRange addressRange() {
  static const AddressRange fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess || q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<AddressRange>(nullptr);
    }
    return reinterpret_cast<AddressRange>(p);
  }();
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
