#include "transport/ll.h"

#include <algorithm>
#include <cstring>

namespace tern {

namespace {
constexpr uint64_t flagOf(uint64_t line, size_t valid) { return (line + 1) << 6 | valid; }
}  // namespace

void LlConn::attach(Conn* owner, void* mine, void* theirs, size_t limit) {
  this->owner = owner;
  peer = owner->peer;
  flowClass = owner->flowClass;
  rx_ = static_cast<LlRing*>(mine);
  tx_ = static_cast<LlRing*>(theirs);
  limit_ = limit;
}

// The reader's `freed` is read only when the ring looks too full for a
// whole private buffer: a small message never waits on that cache line.
// Bytes committed but not yet flushed sit at the front of the buffer.
size_t LlConn::sendSpace(char** p) {
  const uint64_t staged = sent_ - flushed_;
  uint64_t room = (freedSeen_ + kLlLines) * kLlLineData - sent_;
  if (room < kLlStage) {
    freedSeen_ = tx_->freed.load(std::memory_order_acquire);
    room = (freedSeen_ + kLlLines) * kLlLineData - sent_;
  }
  *p = outStage_ + staged;
  return static_cast<size_t>(std::min<uint64_t>(room, kLlStage - staged));
}

void LlConn::sendCommit(size_t n) {
  sent_ += n;
  owner->countSent(n);
}

// Each line's data, then its flag (release): a reader that sees the flag
// sees the bytes.  What one advance() committed (descriptor and payload)
// goes at once, so a small message is one line the reader misses on once.
// A line left partly filled is extended later with a new flag; the reader
// has copied only the bytes the old flag covered.
void LlConn::flush() {
  const char* src = outStage_;
  while (flushed_ < sent_) {
    const uint64_t line = flushed_ / kLlLineData;
    const size_t off = flushed_ % kLlLineData;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(kLlLineData - off, sent_ - flushed_));
    LlLine& l = tx_->lines[line % kLlLines];
    memcpy(l.data + off, src, k);
    l.flag.store(flagOf(line, off + k), std::memory_order_release);
    flushed_ += k;
    src += k;
  }
}

// Copies what the flags say has arrived into the private buffer (kept
// 64-byte aligned to the stream, so payload stays aligned for reductions),
// then tells the writer how many lines it may reuse.
void LlConn::gather() {
  if (consumed_ == gathered_) stageBase_ = consumed_ & ~uint64_t(63);
  if (gathered_ - stageBase_ + kLlLineData > kLlStage && consumed_ - stageBase_ >= 64) {
    const uint64_t base = consumed_ & ~uint64_t(63);
    memmove(inStage_ + (consumed_ - base), inStage_ + (consumed_ - stageBase_), gathered_ - consumed_);
    stageBase_ = base;
  }
  const uint64_t before = gathered_ / kLlLineData;
  for (;;) {
    const uint64_t line = gathered_ / kLlLineData;
    const size_t off = gathered_ % kLlLineData;
    const LlLine& l = rx_->lines[line % kLlLines];
    const uint64_t f = l.flag.load(std::memory_order_acquire);
    const size_t valid = f & 63, room = kLlStage - (gathered_ - stageBase_);
    if ((f >> 6) != line + 1 || valid <= off || room == 0) break;
    const size_t k = std::min(valid - off, room);
    memcpy(inStage_ + (gathered_ - stageBase_), l.data + off, k);
    gathered_ += k;
    if (off + k < kLlLineData) break;  // the line is not complete yet
  }
  if (gathered_ / kLlLineData != before) rx_->freed.store(gathered_ / kLlLineData, std::memory_order_release);
}

size_t LlConn::recvAvail(const char** p) {
  gather();
  *p = inStage_ + (consumed_ - stageBase_);
  return static_cast<size_t>(gathered_ - consumed_);
}

void LlConn::recvConsume(size_t n) {
  consumed_ += n;
  owner->countRecv(n);
}

}  // namespace tern
