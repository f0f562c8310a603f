#include "memory/buffer_kind.h"

#include "memory/cuda_runtime_probe.h"
#include "memory/simulated.h"

namespace tern {

const char* memKindWords(MemType t) {
  return t == MemType::Host ? "host memory" : "device memory";
}

namespace {

struct KindSeen {
  const void* p = nullptr;
  MemType kind = MemType::Host;
  int device = -1;
};
constexpr int kSeen = 4;
thread_local KindSeen tSeen[kSeen];
thread_local int tNext = 0;

}  // namespace

MemType bufferKind(const void* p, int* device) {
  *device = -1;
  if (!p) return MemType::Host;
  if (sim::owns(p)) return MemType::Simulated;
  for (const KindSeen& k : tSeen)
    if (k.p == p) {
      *device = k.device;
      return k.kind;
    }
  KindSeen& k = tSeen[tNext++ % kSeen];
  k.p = p;
  k.kind = pointerKindOn(p, &k.device);
  *device = k.device;
  return k.kind;
}

bool deviceMemoryUsable() { return cudaUsable() || sim::enabled(); }

bool memTypeForBuffers(std::initializer_list<BufferKind> bufs, MemType* type, std::string* why) {
  *type = MemType::Host;
  if (bufs.size() == 0) return true;
  const BufferKind& first = *bufs.begin();
  for (const BufferKind& b : bufs)
    if (b.kind != first.kind) {
      *why = std::string(first.name) + " is " + memKindWords(first.kind) + " but " + b.name +
             " is " + memKindWords(b.kind);
      return false;
    }
  *type = first.kind;
  return true;
}

#ifndef TERN_WITH_CUDA
// Without CUDA nothing here can tell a device pointer from a host one.
MemType pointerKind(const void*) { return MemType::Host; }
MemType pointerKindOn(const void*, int* device) {
  *device = -1;
  return MemType::Host;
}
bool cudaUsable() { return false; }
#endif

}  // namespace tern
