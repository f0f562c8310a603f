// The fifo size every ternary code width divides: a pure function of the
// codec and the rank count, so the communicator can size its fifos without
// knowing the ternary allreduce.
#pragma once
#include <cstddef>

namespace tern {

// Fifo capacities are rounded to a multiple of this so that no header, element
// or group of any width used with `nranks` ranks straddles the wrap point.
size_t ternaryFifoQuantum(int nranks);

}  // namespace tern
