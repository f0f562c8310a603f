// ternMemAlloc / ternMemFree: host memory that peers on this host can map
// (memory/shared_host.h).
#include "memory/shared_host.h"
#include "tern/tern.h"

extern "C" {

ternResult_t ternMemAlloc(void** ptr, size_t size) { return tern::shared_host::allocate(ptr, size); }

ternResult_t ternMemFree(void* ptr) { return tern::shared_host::release(ptr); }

}  // extern "C"
