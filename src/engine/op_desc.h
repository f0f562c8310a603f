// The operation descriptor as it travels (32 bytes ahead of an operation's
// first message on a stream), and the few a stream may owe this rank (kept
// in the engine's marks on the stream, engine/stream_marks.h); what the
// fields must agree on is engine/operation.h's descMatches.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tern {

// What every rank's copy of an operation must agree on.  It travels once per
// stream an operation uses, ahead of the first byte of payload, so ranks that
// called different operations find out before they mix up their data.
struct OpDesc {
  uint32_t magic = 0;
  uint8_t kind = 0;    // OpKindInfo::id
  uint8_t dtype = 0, redop = 0, level = 0;
  int32_t root = -1;   // root; send: destination; recv: source; else -1
  int32_t rank = -1;   // who sent this descriptor
  uint64_t count = 0;  // elements (allgather / reduce-scatter: per rank)
  uint64_t seq = 0;    // collectives: index at this level; p2p: index per peer, direction, level
};
static_assert(sizeof(OpDesc) == 32, "the descriptor is 32 bytes on the wire");
constexpr uint32_t kDescMagic = 0x4f4e5254;  // "TRNO"

// The seq word's top bit on the wire: "this descriptor's message is whole".
// The small path writes a message's payload and the rest of its descriptor
// first and its seq word last (release), with this bit, so a reader that
// finds the seq it expects, so marked, at the place the stream's next bytes
// will lie knows the message is all there without reading the fifo's head
// (one cache-line transfer fewer on its critical path: Conn::recvAhead).
// Every reader clears it (fromWire); the engine never sets it.
constexpr uint64_t kSeqWhole = uint64_t{1} << 63;
constexpr size_t kSeqOffset = 24;
static_assert(offsetof(OpDesc, seq) == kSeqOffset, "the seq word is the descriptor's last");

// A record as read off a stream: a descriptor without its wire-only bit.
template <class T>
void fromWire(T*) {}
inline void fromWire(OpDesc* d) { d->seq &= ~kSeqWhole; }
inline OpDesc descAt(const char* p) {
  OpDesc d;
  memcpy(&d, p, sizeof d);
  fromWire(&d);
  return d;
}

// The small path's whole descriptor at `p` on a stream: all but its seq word
// first (putWholeDesc, before the payload), the seq word with kSeqWhole last
// (markWhole, after it); wholeSeq reads that word as the reader polls.
inline void putWholeDesc(char* p, const OpDesc& d) { memcpy(p, &d, kSeqOffset); }
inline void markWhole(char* p, uint64_t seq) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(p + kSeqOffset), seq | kSeqWhole, __ATOMIC_RELEASE);
}
inline uint64_t wholeSeq(const char* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p + kSeqOffset), __ATOMIC_ACQUIRE);
}

// The peer's descriptors a stream still owes this rank, oldest first: a
// rooted collective's rank that only sends checks the descriptor its peer
// sends back (collectives/transfers.h, Transfers::hear) when it comes, and
// completes without it if it has not come by then; the stream's next reader
// reads it first (engine/descriptors.cc, peekPast).  Bounded: a rank that only
// ever sends runs at most kMax calls ahead of its checks.
class OwedDescs {
 public:
  static constexpr size_t kMax = 8;
  bool empty() const { return n_ == 0; }
  bool full() const { return n_ == kMax; }
  size_t size() const { return n_; }
  const OpDesc& front() const { return d_[head_]; }
  void push(const OpDesc& d) { d_[(head_ + n_++) % kMax] = d; }
  void pop() { head_ = (head_ + 1) % kMax, --n_; }

 private:
  // The counters first: empty() is asked on every small call, and this way
  // it reads the line that the stream's other marks share (StreamMarks).
  size_t head_ = 0, n_ = 0;
  OpDesc d_[kMax];
};

}  // namespace tern
