// Device memory shared between the ranks of one host (CUDA IPC): a rank
// exports the allocation that holds its buffer as a handle, a peer opens the
// handle once and then reads the buffer with a device-to-device copy, so a
// transfer between two device buffers never passes through host memory.
//
// The handle is opaque here; each device memory type fills and opens its own
// (cudaIpcMemHandle_t in cuda_ipc.cu; the simulated device's {pid, memfd,
// offset} in simulated.cc).  Why the legacy cudaIpc* calls and not the VMM
// route (cuMemExportToShareableHandle): the legacy handle is 64 bytes of
// plain data that crosses in the shm segment as it is, where a VMM export is
// a file descriptor that needs a unix socket (SCM_RIGHTS) to cross; and
// PyTorch's caching allocator hands out cudaMalloc memory by default, which
// only the legacy calls export.  Memory they cannot export (cudaMallocAsync
// pools, VMM allocations such as PyTorch's expandable segments) makes export
// fail, and the transfer falls back to host staging.
//
// Opened handles are kept in a process-wide table with a count per handle:
// CUDA refuses to open one handle twice in a process, and two
// communicators (or two levels of one) may read the same peer allocation.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace tern {

struct IpcHandle {
  uint32_t type = 0;    // the MemType that made it
  int32_t device = -1;  // the exporter's device (a sentence names it)
  uint64_t size = 0;    // bytes of the allocation
  unsigned char data[64] = {};  // the type's own handle
  bool operator<(const IpcHandle& o) const { return memcmp(this, &o, sizeof o) < 0; }
};
static_assert(sizeof(IpcHandle) == 80, "a handle crosses in the shm segment as it is");

// Opens a handle (or finds it open) and counts the user: `open` maps it
// (nullptr with *why on failure), `close` unmaps it when its last user
// released it.  nullptr when it cannot be opened.
using IpcCloser = void (*)(const IpcHandle& h, void* base);
void* ipcAcquire(const IpcHandle& h, const std::function<void*(std::string* why)>& open,
                 IpcCloser close, std::string* why);
void ipcRelease(const IpcHandle& h);

// Bytes the engine moved for device buffers, per process: through host
// memory (a device <-> host copy: staging for the fifo or a host operand)
// and device to device from a peer's buffer opened over IPC.  Tests read
// them to show which path a transfer took.
struct DeviceTraffic {
  uint64_t staged = 0, ipc = 0;
};
DeviceTraffic deviceTraffic();
void countStaged(uint64_t bytes);
void countIpc(uint64_t bytes);

}  // namespace tern
