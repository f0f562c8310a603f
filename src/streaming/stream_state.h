// What a weight stream's two ends share between the caller's thread (push,
// poll, wait, close) and the executor's thread (the stream's tasks).
//
// Sender: two staging buffers.  Push claims `pending` under the lock, then
// copies its snapshot in chunks outside it, counting what is in
// (`snapped`); the task moves `moving` chunk by chunk, never past what is
// snapped, so a version starts to move while its snapshot is still being
// taken.  Once a version is through the task swaps in the pending one (a
// newer push has overwritten any version that had not started to move:
// superseded).  Receiver: three buffers.  The task
// fills one; a complete version is swapped into `ready`; poll swaps `ready`
// with the one it copies out of, so the caller never reads a buffer the
// task writes, and only whole versions are ever seen, newest first.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/operation.h"

namespace tern {

// The operation kind of a weight stream's messages (id 32; see kinds.cc for
// the collectives' ids).  Descriptor fields: root = stream id, count = chunk
// bytes, seq = version, dtype = chunk flags.
constexpr uint8_t kWeightStreamKind = 32;
constexpr uint8_t kChunkLast = 1;   // the version's last chunk
constexpr uint8_t kChunkClose = 2;  // no payload: the sender closed the stream
constexpr uint8_t kCloseAck = 4;    // no payload, receiver to sender: the close marker arrived
const OpKindInfo& weightStreamKind();

// The tensors' layout in one flat buffer (each tensor starts 64-aligned).
struct StreamShape {
  std::vector<size_t> offset, bytes;
  size_t total = 0;
};

struct SendSide {
  std::mutex pushMu;                // one snapshot at a time (it copies outside `mu`)
  std::mutex mu;                    // which buffer is pending, the fields below
  std::vector<char> bufs[2];
  // Bytes at the front of bufs[i] that hold the version it was last claimed
  // for (release by the push's copy, acquire by the task before it sends).
  std::atomic<size_t> snapped[2];
  int moving = 0;                   // bufs[moving]: the version on the wire
  long long movingVersion = -1, pendingVersion = -1;  // -1: none
  // When the pending / moving version was first posted (Executor::stamp):
  // a version that supersedes a pending one keeps its stamp, so what a
  // receiver waits for is never behind a collective issued after the push.
  uint64_t pendingStamp = 0, movingStamp = 0, closeStamp = 0;
  long long lastPushed = -1;
  bool opActive = false;            // a sender operation is admitted
  bool closing = false, closeSent = false;
  OpPtr op;                         // the admitted one (Close waits on it)
};

struct RecvSide {
  std::mutex mu;                    // ready, readyVersion (the engine's swap)
  std::condition_variable arrived;  // a version became ready
  std::vector<char> bufs[3];
  int fill = 0, ready = 1, read = 2;
  long long readyVersion = -1, readVersion = -1;
  std::mutex readMu;                // the buffer a poll copies out of
  std::atomic<bool> abandoned{false};  // Close timed out: the receiver stops draining
  OpPtr op;                         // the standing receiver
};

struct StreamState {
  int id = 0, rank = 0, peer = 0, sender = 0, level = 0;
  size_t chunkBytes = 1 << 20;
  size_t queuedMax = 0;  // TERN_STREAM_QUEUED: a chunk waits while the kernel holds more (0: never)
  StreamShape shape;
  SendSide send;
  RecvSide recv;
  bool isSender() const { return rank == sender; }
};

}  // namespace tern
