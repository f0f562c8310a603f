// Which memory an operation's buffers are in, and so which MemOps runs it.
//
// pointerKind asks CUDA (cudaPointerGetAttributes) in builds with CUDA; it
// never makes libtern need a GPU: the runtime is linked statically and loads
// libcuda itself, so on a machine without a driver or a device every pointer
// is host memory.  In a build without CUDA a device pointer cannot be
// recognised at all: there the API's refusal of stream != NULL ("collectives
// on device buffers are not supported yet") stays the guard.
//
// Asking CUDA creates its context on first use (and a context does not
// survive fork), so callers ask only for operations that come with a stream:
// with stream == NULL the buffers are host memory, as they always were.
#pragma once
#include <initializer_list>
#include <string>

#include "memory/memory.h"

namespace tern {

// Host for host memory (pageable, pinned or registered: the CPU may touch
// it), Cuda for device and managed memory (only kernels touch it).  Host for
// nullptr and wherever CUDA is absent or unusable.
MemType pointerKind(const void* p);

// pointerKind and, for device memory, the device it is on (else -1).
MemType pointerKindOn(const void* p, int* device);

// The kind of one buffer of a call that comes with a stream: the simulated
// device's (memory/simulated.h) when a test enabled it and the address is
// its own, else pointerKindOn.  The last few answers are kept per thread:
// a training step asks about the same buffers every time, and
// cudaPointerGetAttributes is a driver call.
MemType bufferKind(const void* p, int* device);

// Whether this process can run anything on a device at all: CUDA with a
// usable device, or the simulated device.  A call with a stream gets
// ternInvalidArgument when it cannot.
bool deviceMemoryUsable();

// "device memory" / "host memory": how a sentence names a kind.
const char* memKindWords(MemType t);

struct BufferKind {
  const char* name;  // as the API names it: "sendbuff", "recvbuff"
  MemType kind;
};

// The memory type of an operation whose buffers have these kinds (the
// caller leaves out buffers it does not use).  All the same: true and *type.
// A mix: false and *why = "sendbuff is device memory but recvbuff is host
// memory" (the first buffer against the first that differs).  No buffers: Host.
bool memTypeForBuffers(std::initializer_list<BufferKind> bufs, MemType* type, std::string* why);

}  // namespace tern
