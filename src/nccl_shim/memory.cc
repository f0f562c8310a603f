// Buffer registration, windows and NCCL's allocator.  tern's host path
// copies through its own staging buffers, so registering a buffer changes
// nothing about how it moves: a handle records the range so that
// deregistration can be checked, as NCCL checks it.
#include <cuda.h>  // types only: the driver's functions come from driverFunction

#include <map>
#include <set>

#include "nccl_shim/shim.h"

struct ncclWindow_vidmem {  // the opaque ncclWindow_t of nccl.h
  ncclComm_t comm;
  void* buff;
  size_t size;
  int flags;
};

namespace {

struct Registration {
  ncclComm_t comm;
  void* buff;
  size_t size;
};

std::mutex handlesMu;
// Live Registration and ncclWindow_vidmem objects, with how each is freed.
std::map<const void*, std::pair<ncclComm_t, void (*)(const void*)>> handles;

void freeRegistration(const void* h) { delete static_cast<const Registration*>(h); }
void freeWindow(const void* h) { delete static_cast<const ncclWindow_vidmem*>(h); }

void remember(ncclComm_t comm, const void* h, void (*release)(const void*)) {
  std::lock_guard<std::mutex> g(handlesMu);
  handles[h] = {comm, release};
}

// Frees h if it is a live handle of comm.
bool forget(ncclComm_t comm, const void* h) {
  std::lock_guard<std::mutex> g(handlesMu);
  auto it = handles.find(h);
  if (it == handles.end() || it->second.first != comm) return false;
  it->second.second(h);
  handles.erase(it);
  return true;
}

ncclResult_t checkRange(ncclComm_t comm, const void* buff, size_t size, const void* out,
                        const char* what) {
  if (ncclResult_t r = shim::checkComm(comm, what)) return r;
  if (!out) return shim::fail(ncclInvalidArgument, "%s: the handle pointer is NULL", what);
  if (!buff || size == 0) return shim::fail(ncclInvalidArgument, "%s: buff is NULL or size is 0", what);
  return ncclSuccess;
}

}  // namespace

namespace shim {

// A destroyed communicator's registrations and windows go with it, as in NCCL.
void dropHandles(ncclComm_t comm) {
  std::lock_guard<std::mutex> g(handlesMu);
  for (auto it = handles.begin(); it != handles.end();) {
    if (it->second.first != comm) {
      ++it;
      continue;
    }
    it->second.second(it->first);
    it = handles.erase(it);
  }
}

}  // namespace shim

using namespace shim;

NCCL_SHIM_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
              void** handle) {
  ncclResult_t r = checkRange(comm, buff, size, handle, "ncclCommRegister");
  if (r == ncclSuccess) {
    *handle = new Registration{comm, buff, size};
    remember(comm, *handle, freeRegistration);
  }
  return traced(comm, r, "ncclCommRegister(%p, %zu bytes)", buff, size);
}

NCCL_SHIM_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  ncclResult_t r = checkComm(comm, "ncclCommDeregister");
  if (r == ncclSuccess && (!handle || !forget(comm, handle)))
    r = fail(ncclInvalidArgument,
             "ncclCommDeregister: handle %p is not a live ncclCommRegister handle of this "
             "communicator",
             handle);
  return traced(comm, r, "ncclCommDeregister(%p)", handle);
}

// NCCL's windows are collective and symmetric for its device kernels; the
// host path has no kernels, so a window is a recorded range and every rank
// may register on its own.
NCCL_SHIM_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
              ncclWindow_t* win, int winFlags) {
  ncclResult_t r = checkRange(comm, buff, size, win, "ncclCommWindowRegister");
  if (r == ncclSuccess && (winFlags & ~NCCL_WIN_COLL_SYMMETRIC))
    r = fail(ncclInvalidArgument, "ncclCommWindowRegister: unknown winFlags 0x%x", winFlags);
  if (r == ncclSuccess) {
    *win = new ncclWindow_vidmem{comm, buff, size, winFlags};
    remember(comm, *win, freeWindow);
  }
  return traced(comm, r, "ncclCommWindowRegister(%p, %zu bytes, flags=0x%x)", buff, size, winFlags);
}

NCCL_SHIM_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t r = checkComm(comm, "ncclCommWindowDeregister");
  if (r == ncclSuccess && (!win || !forget(comm, win)))
    r = fail(ncclInvalidArgument,
             "ncclCommWindowDeregister: %p is not a live ncclCommWindowRegister window of this "
             "communicator",
             (void*)win);
  return traced(comm, r, "ncclCommWindowDeregister(%p)", (void*)win);
}

// ncclMemAlloc: device memory of the calling thread's current device, from
// the CUDA driver the program has loaded (the shim never loads CUDA and
// links nothing of it).  Plain cuMemAlloc memory, which tern's device path
// takes like cudaMalloc's (CUDA IPC between the ranks of a host included);
// NCCL's own allocator maps multicast-capable memory that only its symmetric
// kernels need.  ncclMemFree frees only what ncclMemAlloc handed out.
namespace {

std::mutex allocsMu;
std::set<void*> allocs;

ncclResult_t deviceAlloc(void** ptr, size_t size) {
  if (!ptr || size == 0) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL or size is 0");
  *ptr = nullptr;
  auto getCurrent = driverFunction<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto alloc = driverFunction<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  if (!getCurrent || !alloc)
    return fail(ncclInvalidUsage,
                "ncclMemAlloc: this process has not loaded the CUDA driver (libcuda.so.1), so it "
                "has no device to allocate on: call cudaSetDevice first");
  CUcontext ctx = nullptr;
  if (getCurrent(&ctx) != CUDA_SUCCESS || !ctx)
    return fail(ncclInvalidUsage,
                "ncclMemAlloc: the calling thread has no current CUDA context: call cudaSetDevice "
                "first");
  CUdeviceptr d = 0;
  if (CUresult e = alloc(&d, size)) {
    const char* name = "?";
    if (auto errName = driverFunction<CUresult (*)(CUresult, const char**)>("cuGetErrorName")) errName(e, &name);
    return fail(ncclUnhandledCudaError, "ncclMemAlloc: cuMemAlloc of %zu bytes failed: %s", size, name);
  }
  *ptr = reinterpret_cast<void*>(d);
  std::lock_guard<std::mutex> g(allocsMu);
  allocs.insert(*ptr);
  return ncclSuccess;
}

ncclResult_t deviceFree(void* ptr) {
  if (!ptr) return ncclSuccess;  // like free(NULL)
  {
    std::lock_guard<std::mutex> g(allocsMu);
    if (!allocs.erase(ptr))
      return fail(ncclInvalidArgument, "ncclMemFree: %p was not allocated by ncclMemAlloc", ptr);
  }
  auto release = driverFunction<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  if (!release || release(reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    return fail(ncclUnhandledCudaError, "ncclMemFree: cuMemFree of %p failed", ptr);
  return ncclSuccess;
}

}  // namespace

NCCL_SHIM_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  return traced(nullptr, deviceAlloc(ptr, size), "ncclMemAlloc(%zu bytes)", size);
}

NCCL_SHIM_API(ncclResult_t, ncclMemFree, void* ptr) {
  return traced(nullptr, deviceFree(ptr), "ncclMemFree(%p)", ptr);
}
