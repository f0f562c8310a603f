// CUDA's IPC calls behind memory/ipc.h's handle (cuda_ipc.cu): the legacy
// cudaIpcGetMemHandle / cudaIpcOpenMemHandle (ipc.h says why not VMM).
#pragma once
#include <cstdint>
#include <string>

#include "memory/ipc.h"

namespace tern {

// The handle of the cudaMalloc allocation holding p (on the current
// device) and p's offset in it; false for memory CUDA cannot export.
bool exportCudaBuffer(const void* p, IpcHandle* h, uint64_t* offset);
// Maps a peer's allocation on the current device (peer access enabled
// where the devices differ); nullptr and *why when CUDA refuses.
void* openCudaBuffer(const IpcHandle& h, std::string* why);
void closeCudaBuffer(const IpcHandle& h, void* base);

}  // namespace tern
