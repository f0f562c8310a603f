// The engine's marks on one stream (a Conn): which operation writes or reads
// a message on it, who waits for it, the peer's descriptors it still owes,
// and the single-copy counters.  They are the engine's arbitration state,
// not the transport's, so they live here and reach a connection only as its
// opaque attachment (Conn::attached), made on the engine's first use of the
// stream.  Driving thread only, as every use of a stream is.
#pragma once
#include <cstdint>

#include "engine/op_desc.h"
#include "transport/transport.h"

namespace tern {

// Its first cache line holds what every small call reads (the claims and
// the owed queue's counters).
struct alignas(64) StreamMarks final : Conn::Attached {
  // The operation whose message is being written / read on this stream,
  // from its descriptor until it lets go (stream_claims.h).  Ordered
  // operations of a level never overlap on a stream; these let an
  // interleaved one (a weight stream's chunk) slip in between them only at
  // message boundaries.
  const void* reader = nullptr;
  const void* writer = nullptr;
  // The issue stamp of an ordered operation waiting for the writer; an
  // interleaved message posted after it lets it go first.
  uint64_t wantedBy = UINT64_MAX;
  // The post stamp of an interleaved message that waits to go without
  // holding the writer (a weight stream's chunk held back while the kernel
  // queues enough of the stream): an ordered operation issued after it
  // waits for it as if it held the stream, or "push; allreduce" on one rank
  // and "wait for the version; allreduce" on the other would wait for each
  // other.
  uint64_t reservedAt = UINT64_MAX;
  // The peer's descriptors this stream still owes: read and checked before
  // anything else on it (descriptors.cc, peekPast).
  OwedDescs owed;
  // The last descriptor written on the stream / taken off it, whole: what
  // the next may repeat in one word (op_desc.h, kRepeatTag).
  OpDesc sent, heard;
  uint64_t directPosted = 0;  // sender: bytes posted for direct reads so far
  uint64_t directSeen = 0;    // receiver: bytes of posted transfers announced so far (the tickets)
  unsigned pathsLogged = 0;   // which transfer paths were logged at INFO (direct_transfer.cc)
};

// Makes a stream's marks (its first use by the engine); out of line, so
// that the small path's inlined loops carry no allocation.
[[gnu::cold, gnu::noinline]] StreamMarks& makeMarks(Conn* c);

// The stream's marks, made on first use.
inline StreamMarks& marks(Conn* c) {
  if (__builtin_expect(c->attached != nullptr, 1)) return static_cast<StreamMarks&>(*c->attached);
  return makeMarks(c);
}

// The marks if the engine has used the stream, else nullptr (never makes them).
inline const StreamMarks* marksIfAny(const Conn* c) { return static_cast<const StreamMarks*>(c->attached.get()); }

// Whether an operation reads or writes a message on the stream now.
inline bool claimed(const Conn* c) {
  const StreamMarks* m = marksIfAny(c);
  return m && (m->reader || m->writer);
}

// Whether some operation reads a message on the stream now (other than `self`).
inline bool beingRead(const Conn* c, const void* self = nullptr) {
  const StreamMarks* m = marksIfAny(c);
  return m && m->reader && m->reader != self;
}

}  // namespace tern
