// The two fifos of a shared-memory connection and the per-message work on
// them, inline.  ShmConn's stream methods are these; the small path
// (engine/inline_runner.cc, whole_message.h) calls them directly through Conn::shm, without the
// virtual call and the out-of-line fifo call per operation on a stream that
// cost as much as the work on an 8-byte message.
#pragma once
#include <algorithm>
#include <cstdint>

#include "transport/fifo.h"

namespace tern {

struct ShmStreams {
  // Where a message's descriptor starts (Conn::recordAlign, recordSkip).
  static constexpr size_t kRecordAlign = 8;
  Fifo send, recv;
  uint64_t fetched = 0;  // stream position up to which the receive side prefetched

  size_t sendSpace(char** p) { return send.writable(p); }
  bool sendOutruns(size_t n) const { return send.outrunsWindow(n); }  // after sendSpace
  // (The connection counts the bytes: Conn::countSent / countRecv.)
  void sendCommit(size_t n) { send.produce(n); }
  // Bytes that just arrived are fetched all at once: a small message's few
  // lines then miss together instead of one by one in the reduction loop.
  size_t recvAvail(const char** p) {
    size_t n = recv.readable(p);
    prefetch(*p, n);
    return n;
  }
  size_t recvAhead(const char** p) const { return recv.ahead(p); }
  // A message found where it lay: its lines miss together, as recvAvail's,
  // and the two lines where the next one will lie are asked for now.  A
  // sender running ahead (a rooted collective's) has often written them
  // already, so the miss overlaps the rest of this call instead of starting
  // the next (2-rank 8-byte broadcast 0.90x the time in the slow phase;
  // exchanges, whose next message comes later, unchanged).  Prefetches never
  // fault, so past the ring's end is harmless.
  void recvFound(const char* at, size_t n) {
    prefetch(at, n);
    recv.found(n);
    __builtin_prefetch(at + n);
    __builtin_prefetch(at + n + 64);
  }
  void recvConsume(size_t n) { recv.consume(n); }
  uint64_t sendPos() const { return send.produced(); }
  uint64_t recvPos() const { return recv.consumed(); }

  void prefetch(const char* p, size_t n) {
    const uint64_t end = recv.consumed() + n;
    if (end > fetched) {
      const uint64_t from = std::max(fetched, recv.consumed());
      const char* q = p + (from - recv.consumed());
      for (uint64_t k = 0; k < std::min<uint64_t>(end - from, 4096); k += 64) __builtin_prefetch(q + k);
      fetched = end;
    }
  }
};

}  // namespace tern
