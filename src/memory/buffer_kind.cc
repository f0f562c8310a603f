#include "memory/buffer_kind.h"

namespace tern {

const char* memKindWords(MemType t) {
  return t == MemType::Cuda ? "device memory" : "host memory";
}

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
#endif

}  // namespace tern
