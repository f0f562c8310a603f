// A stand-in for the GPU where none can exist (CI has nvcc but no device):
// the simulated device runs the engine's asynchronous memory path (memory.h,
// "Async contract") end to end with no CUDA at all, so stream ordering,
// fences, holds and "host code never touches device memory" are tested on
// every CI run.  Test-only: nothing selects it but sim::enable(), which only
// tests call.
//  - Device memory: addresses in a reserved range mapped PROT_NONE, so a
//    host dereference of a "device pointer" faults (the test crashes, never
//    passes); the bytes live in a second mapping at the same offset, which
//    only work running on a simulated stream reaches (resolve()).
//    The bytes are a memfd, so another process can map an allocation (IPC).
//  - A stream: one worker thread running enqueued work in order; an event is
//    the count of work enqueued when it was recorded (reached when that much
//    has run); a hold is a work item that blocks until released.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "memory/memory.h"

namespace tern {
namespace sim {

// Turns the simulated device on in this process (after fork: threads and
// mappings are made here).  Buffers from alloc() then run with a stream as
// MemType::Simulated; everything else is unchanged.
void enable();
bool enabled();
bool owns(const void* p);  // an address alloc() returned (false until enable())
void* alloc(size_t bytes);  // never freed (a test's few buffers); nullptr when full
// IPC between processes (memory/ipc.h): an allocation's handle names this
// process's memfd and the allocation's place in it; opening maps those
// bytes into this process's device range (pidfd_getfd, else /proc/PID/fd).
// So a peer's "device pointer" is again one the host cannot touch.
bool ipcExport(const void* p, IpcHandle* h, uint64_t* offset);
void* ipcOpen(const IpcHandle& h, std::string* why);
void ipcClose(const IpcHandle& h, void* base);
// Test hook: ipcOpen fails (devices that cannot reach each other).
void refuseIpc(bool refuse);
// The bytes behind a device address; other pointers unchanged.  Only work on
// a simulated stream may call it.
void* resolve(const void* p);

// Blocks wait() until release(): a stream hold (a work item on the
// caller's stream that ends when the operation does), or a test's gate.
class Latch {
 public:
  void wait() {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return open_; });
  }
  void release() {
    std::lock_guard<std::mutex> lk(m_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

class Stream;
Stream* newStream();  // lives until the process exits
void enqueue(Stream* s, std::function<void()> work);
void synchronize(Stream* s);
// Test hook modelling the CUDA driver's lock: a thread blocked in
// synchronize() holds it shared, and every enqueue takes it exclusively.
// On a GPU, an executor that enqueues device work while the caller waits
// on its held stream deadlocks that way (perf/RESULTS.md, 2026-12-04: GPU
// checks on an H200); with this on, it deadlocks here too.
void modelDriverLock(bool on);
// Test model of CUDA graph capture: between beginCapture and endCapture the
// work enqueued on the stream is recorded into a graph instead of run;
// launchGraph enqueues the recorded work on a stream again (a replay);
// destroyGraph runs the destructors it was given (keepWithGraph), as CUDA's
// user objects do.
struct Graph;
void beginCapture(Stream* s);
bool capturing(Stream* s);
Graph* endCapture(Stream* s);
void launchGraph(Graph* g, Stream* s);
void destroyGraph(Graph* g);
void keepWithGraph(Stream* s, std::function<void()> destroy);
// Copies on the stream between host and (simulated) device memory.
void memcpyAsync(Stream* s, void* dst, const void* src, size_t bytes);

// The memory type's operations for a call on `stream` (a Stream*).
std::unique_ptr<MemOps> makeOps(void* stream);

}  // namespace sim
}  // namespace tern
