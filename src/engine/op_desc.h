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
// Every reader clears it (descAt, descRecordAt); the engine never sets it.
constexpr uint64_t kSeqWhole = uint64_t{1} << 63;
constexpr size_t kSeqOffset = 24;
static_assert(offsetof(OpDesc, seq) == kSeqOffset, "the seq word is the descriptor's last");

// A descriptor by reference: an operation whose descriptor repeats the last
// one its writer put on the stream in every field but a later seq travels as
// one 8-byte word (kRepeatTag, the seq's low 47 bits, and kSeqWhole's bit),
// not 32 bytes.  A stream's reader rebuilds it from the last descriptor it
// took off the stream (StreamMarks::heard), which is the writer's last
// (StreamMarks::sent): both see the stream's descriptors in the same order.
// The word carries the seq itself, not its step from the last: the small
// path polls for it ahead of the writer (Conn::recvAhead), where a word a
// lap of the ring earlier would read the same as a step (1, mostly) would.
// Only plain steps' descriptors (no codec or single-copy header after them)
// may repeat, so a reader lays out what follows the same either way.  An
// 8-byte call's message is then 16 bytes, four to a cache line, where 40
// took most of one: the line its receiver waits on per call in the slow
// phase (perf/RESULTS.md, 2026-12-06: a repeated descriptor in one word).
// Its first two bytes tell it from a whole descriptor (kDescMagic's differ).
constexpr uint64_t kRepeatTag = 0x7274;  // "tr"
constexpr size_t kRepeatBytes = 8;
constexpr int kRepeatSeqBits = 47;
constexpr uint64_t kRepeatSeqMask = (uint64_t{1} << kRepeatSeqBits) - 1;
static_assert((kDescMagic & 0xffff) != kRepeatTag, "a repeat's tag differs from a descriptor's magic");

// Whether `d` may travel as a repeat of `last`, the stream's last descriptor.
inline bool repeats(const OpDesc& last, const OpDesc& d) {
  return last.magic == kDescMagic && d.seq > last.seq && d.seq - last.seq <= kRepeatSeqMask &&
         memcmp(&last, &d, kSeqOffset) == 0;
}
// The repeat's word, without kSeqWhole.
inline uint64_t repeatWord(const OpDesc& d) { return kRepeatTag | (d.seq & kRepeatSeqMask) << 16; }
// The bytes `d` takes after `last` on a stream, as a repeat or whole.
inline size_t descBytesAfter(const OpDesc& last, const OpDesc& d) {
  return repeats(last, d) ? kRepeatBytes : sizeof(OpDesc);
}

// A descriptor as read off a stream: without its wire-only bit.
inline OpDesc descAt(const char* p) {
  OpDesc d;
  memcpy(&d, p, sizeof d);
  d.seq &= ~kSeqWhole;
  return d;
}

// The small path's descriptor record of `bytes` at `p` on a stream: a whole
// descriptor's words but its seq first (putWholeDesc, before the payload),
// then the record's last word, with kSeqWhole (markWhole, after the payload:
// the seq word, or a repeat's only word); wholeWordIn reads that word as the
// reader polls.
inline void putWholeDesc(char* p, const OpDesc& d, size_t bytes) {
  if (bytes == sizeof(OpDesc)) memcpy(p, &d, kSeqOffset);
}
inline void markWhole(char* p, size_t bytes, uint64_t word) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(p + bytes - sizeof word), word, __ATOMIC_RELEASE);
}
inline uint64_t wholeWordIn(const char* p, size_t bytes) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p + bytes - sizeof(uint64_t)), __ATOMIC_ACQUIRE);
}

// The descriptor record at `p`, `avail` bytes there, `heard` the last one
// taken off the stream: its length (kRepeatBytes or a whole descriptor's)
// with *d rebuilt, or 0 while it has not all come.  Bytes that are not a
// descriptor read as one without its magic (descMismatch says so).
inline size_t descRecordAt(const char* p, size_t avail, const OpDesc& heard, OpDesc* d) {
  if (avail < kRepeatBytes) return 0;
  uint64_t w;
  memcpy(&w, p, sizeof w);
  if ((w & 0xffff) == kRepeatTag) {  // the seq: the first above the last heard with these low bits
    *d = heard;
    d->seq = heard.seq + ((((w & ~kSeqWhole) >> 16) - heard.seq) & kRepeatSeqMask);
    return kRepeatBytes;
  }
  if (avail < sizeof(OpDesc)) return 0;
  *d = descAt(p);
  return sizeof(OpDesc);
}

// What the word that ends a descriptor record of `bytes` reads once the
// small path's message is whole (markWhole).
inline uint64_t wholeWord(const OpDesc& d, size_t bytes) {
  return (bytes == kRepeatBytes ? repeatWord(d) : d.seq) | kSeqWhole;
}

// The peer's descriptors a stream still owes this rank, oldest first: a
// rooted collective's rank that only sends checks the descriptor its peer
// sends back (collectives/transfers.h, Transfers::hear) when it comes, and
// completes without it if it has not come by then; the stream's next reader
// reads it first (engine/descriptors.cc, peekPast).  Bounded: a rank that only
// ever sends runs at most kMax calls ahead of its checks.
class OwedDescs {
 public:
  static constexpr size_t kMax = 64;
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
