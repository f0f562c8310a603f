// Bytes per element of a ternDataType_t, inline: the engine asks per step
// and per burst, and the exported ternTypeSize is a call through the PLT.
#pragma once
#include <cstddef>

#include "tern/tern.h"

namespace tern {

inline size_t typeSize(ternDataType_t dt) {
  switch (dt) {
    case ternInt8: case ternUint8: return 1;
    case ternFloat16: case ternBfloat16: return 2;
    case ternInt32: case ternUint32: case ternFloat32: return 4;
    case ternInt64: case ternUint64: case ternFloat64: return 8;
    default: return 0;
  }
}

}  // namespace tern
