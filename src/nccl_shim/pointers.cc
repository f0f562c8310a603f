// Device buffers passed with a NULL stream: tern's host path would read and
// write them as host memory and crash the caller.  A program can only hold
// device memory if the CUDA driver (libcuda.so.1) is loaded in it, so the
// shim asks that driver, if it is already there, what each buffer is; it
// never loads CUDA itself and links nothing of it.
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>

#include "nccl_shim/shim.h"

namespace shim {

void* driverFunction(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);  // only if already loaded
  if (!lib) return nullptr;
  void* f = dlsym(lib, name);
  dlclose(lib);  // the program's own reference keeps it mapped
  return f;
}

namespace {

using GetAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

// The driver's cuPointerGetAttribute once the program has loaded the driver.
// Not yet loaded: looked for again at most once a second (a program may load
// CUDA after its first NCCL call; dlopen's search on every call would cost
// more than a small collective).
GetAttribute driver() {
  static std::atomic<GetAttribute> fn{nullptr};
  static std::atomic<long long> nextLook{0};
  GetAttribute f = fn.load();
  if (f) return f;
  long long now = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now < nextLook.load()) return nullptr;
  nextLook.store(now + 1000);
  f = driverFunction<GetAttribute>("cuPointerGetAttribute");
  fn.store(f);
  return f;
}

// Device memory the host cannot touch (managed memory it can).
bool onDevice(const void* p) {
  GetAttribute f = p ? driver() : nullptr;
  if (!f) return false;
  unsigned int type = 0, managed = 0;
  CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
  // An error (ordinary host memory, no context yet) means: not the driver's.
  if (f(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) != CUDA_SUCCESS) return false;
  if (f(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d) == CUDA_SUCCESS && managed) return false;
  return type == CU_MEMORYTYPE_DEVICE;
}

}  // namespace

bool deviceBuffers(const void* a, const void* b) { return onDevice(a) || onDevice(b); }

int currentDevice() {
  using CtxGetDevice = CUresult (*)(CUdevice*);
  auto f = driverFunction<CtxGetDevice>("cuCtxGetDevice");
  CUdevice d = -1;
  return f && f(&d) == CUDA_SUCCESS ? static_cast<int>(d) : -1;
}

}  // namespace shim
