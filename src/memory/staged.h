// One launch per collective on device buffers: the caller's thread enqueues
// everything the device does for the call on the caller's own stream, and
// the executor runs the collective on pinned host copies of the buffers,
// never calling the driver.
//
//   caller's stream:  copy sendbuff -> pinned in   (async)
//                     flag := in                   (stream memory operation)
//                     wait flag >= out             (stream memory operation)
//                     copy pinned out -> recvbuff  (async)
//                     flag := free
//   executor:         starts once flag >= in (a load of mapped memory),
//                     runs the host collective on the pinned buffers,
//                     flag := out at the end (a store)
//
// Why: the engine's device path (cuda_ops.cu) calls the driver from the
// executor's thread while the caller's stream is held, and the driver's
// lock, which a caller blocked on that stream keeps, deadlocked two ranks
// on an H200 (perf/RESULTS.md, 2026-12-04: GPU checks on an H200). Here the
// executor touches host memory only, so nothing it does can wait on the
// caller. There is no host synchronisation and no allocation per call
// (pinned buffers and flag slots are reused), and the enqueued work is
// five stream operations, which a CUDA graph can capture.
//
// Flags are 32-bit slots of mapped memory whose values only grow, so a
// slot is reused without a stale wait seeing a smaller value. A call's
// pinned buffers and slot go back once the stream has set `free`: the
// executor finishes before the copy back runs.
//
// Under CUDA graph capture the enqueued operations are recorded, and a host
// node hands the engine the collective at each replay (captureStaged).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "memory/memory.h"
#include "memory/staging_pool.h"

namespace tern {

// The device side of staged calls: CUDA's (staged_cuda.cu) or the simulated
// device's (simulated.cc). Enqueue calls return 0 or an error code, and
// error() turns a code into a sentence.
class StagedDevice {
 public:
  virtual ~StagedDevice() = default;
  virtual int toHost(void* host, const void* dev, size_t bytes, void* stream) const = 0;
  virtual int toDevice(void* dev, const void* host, size_t bytes, void* stream) const = 0;
  virtual int deviceToDevice(void* dst, const void* src, size_t bytes, void* stream) const = 0;
  // The stream sets the flag to v when it gets there.
  virtual int writeFlag(uint32_t slot, uint32_t v, void* stream) const = 0;
  // Work enqueued on the stream later waits until the flag is >= v.
  virtual int waitFlag(uint32_t slot, uint32_t v, void* stream) const = 0;
  // The host's side: plain loads and stores of the mapped flags.
  virtual uint32_t flag(uint32_t slot) const = 0;
  virtual void setFlag(uint32_t slot, uint32_t v) const = 0;
  virtual bool takeFlag(uint32_t* slot) const = 0;  // false: none free
  virtual void giveBackFlag(uint32_t slot) const = 0;
  virtual StagingPool* pinned() const = 0;  // nullptr: no pinned memory
  // A pinned buffer (p == nullptr: none), also while a stream is captured.
  virtual StagingPool::Buffer borrowPinned(size_t bytes) const { return pinned()->borrow(bytes); }
  virtual std::string error(int code) const = 0;

  // CUDA graph capture.  Whether `stream` is being captured into a graph;
  // a host function on the stream (captured: a node run at each replay;
  // it must not call the driver); destroy(obj) once the graph being
  // captured on `stream` is destroyed.
  virtual bool capturing(void* stream) const = 0;
  virtual int hostNode(void (*fn)(void*), void* arg, void* stream) const = 0;
  virtual int keepWithGraph(void* stream, void (*destroy)(void*), void* obj) const = 0;
};

// nullptr in a build without CUDA or without a usable device.
const StagedDevice* cudaStagedDevice();
namespace sim {
const StagedDevice* stagedDevice();
}

// A call's buffers on this rank (bytes 0: the call does not use it there).
struct StagedBuffers {
  const void* src = nullptr;
  size_t srcBytes = 0;
  void* dst = nullptr;
  size_t dstBytes = 0;
};

// The memory operations of a staged call on the caller's `stream`: the
// host's, on pinned copies of `b`'s buffers, whose addresses replace
// b.src / b.dst. begin() enqueues the device side. nullptr and *why when
// the call cannot be staged (no pinned memory, no free flag slot).
std::unique_ptr<MemOps> makeStagedOps(const StagedDevice& dev, void* stream, StagedBuffers* b,
                                      std::string* why);

// A staged call recorded into the graph being captured on `stream`: the
// graph gets a host node that hands the engine a fresh operation at each
// replay (submit(), given the call's memory operations), then the same
// copies and flag operations as a staged call.  The flags are reset by that
// node (the graph's replays run one after another, so no earlier wait is
// pending then).  The graph owns the pinned buffers and flags.  false and
// *why when it cannot be recorded; b's buffers are replaced as by
// makeStagedOps.
using StagedSubmit = std::function<void(std::unique_ptr<MemOps>)>;
bool captureStaged(const StagedDevice& dev, void* stream, StagedBuffers* b, StagedSubmit submit,
                   std::string* why);

// Calls staged so far in this process (tests: which path a call took).
size_t stagedCalls();

// Staged calls whose buffers' pinned copies are still in use by a stream
// (for tests: 0 once every stream has finished its copies back and the
// next staged call, or this, swept them).
size_t stagedInFlight();

}  // namespace tern
