#include "codec/fifo_quantum.h"

#include <algorithm>
#include <numeric>

#include "codec/ternary_math.h"

namespace tern {

size_t ternaryFifoQuantum(int nranks) {
  size_t q = 4096;  // pages; also a multiple of the 16-byte headers and 8-byte elements
  for (int w = 2; w <= std::min(ternaryWidth(std::max(nranks, 1)), kTernaryMaxWidth); ++w)
    q = std::lcm(q, static_cast<size_t>(4 * w));
  return q;
}

}  // namespace tern
