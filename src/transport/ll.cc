#include "transport/ll.h"

#include <algorithm>
#include <cstring>

namespace tern {

namespace {
// A flag: the line's number + 1, the lines in its flush (first line only,
// at most 63; 0 on the others) and its valid bytes.
constexpr uint64_t flagOf(uint64_t line, size_t valid, uint64_t lines = 0) {
  return (line + 1) << 12 | std::min<uint64_t>(lines, 63) << 6 | valid;
}
constexpr uint64_t lineOf(uint64_t flag) { return (flag >> 12) - 1; }
constexpr uint64_t linesFor(uint64_t bytes) { return (bytes + kLlLineData - 1) / kLlLineData; }
}  // namespace

void LlConn::attach(Conn* owner, void* mine, void* theirs, size_t limit) {
  this->owner = owner;
  peer = owner->peer;
  flowClass = owner->flowClass;
  rx_ = static_cast<LlRing*>(mine);
  tx_ = static_cast<LlRing*>(theirs);
  limit_ = limit;
}

// Bytes the writer may still stage: what fits in the lines the reader has
// returned, less what is staged already.  The reader's `freed` is read only
// when that looks short of a whole private buffer: a small message never
// waits on that cache line.
// The private buffer keeps the stream's alignment (a flush may end at any
// byte; the next message starts 8-aligned on the stream, and so must its
// payload in memory for the reduction that writes it): staging starts at the
// flushed position's offset within a line.
size_t LlConn::sendSpace(char** p) {
  const uint64_t staged = sent_ - flushed_;
  const size_t off = static_cast<size_t>(flushed_ & 63);
  auto room = [&] {
    const uint64_t lines = freedSeen_ + kLlLines - nextLine_;
    return lines * kLlLineData > staged ? lines * kLlLineData - staged : 0;
  };
  uint64_t r = room();
  if (r < kLlStage) {
    freedSeen_ = tx_->freed.load(std::memory_order_acquire);
    r = room();
  }
  *p = outStage_ + off + staged;
  return static_cast<size_t>(std::min<uint64_t>(r, kLlStage - off - staged));
}

void LlConn::sendCommit(size_t n) {
  sent_ += n;
  owner->countSent(n);
}

// What the engine committed since the last flush (a step's descriptor and
// payload) goes into fresh lines, each written once: data, then its flag
// (release).  The first line's flag goes last: a reader that sees it sees
// the whole flush (release/acquire; on x86 stores simply become visible in
// order), so it copies the following lines without waiting on each, and
// their cache misses overlap like a plain copy's instead of queueing one
// behind another.  A line is never extended later (a partly filled one is
// simply shorter), so the reader never reads a line being written.
void LlConn::flush() {
  if (flushed_ == sent_) return;
  const char* stage = outStage_ + (flushed_ & 63);  // as sendSpace staged it
  const uint64_t first = nextLine_;
  const size_t k0 = static_cast<size_t>(std::min<uint64_t>(kLlLineData, sent_ - flushed_));
  const char* src = stage + k0;
  flushed_ += k0;
  ++nextLine_;
  while (flushed_ < sent_) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(kLlLineData, sent_ - flushed_));
    LlLine& l = tx_->lines[nextLine_ % kLlLines];
    memcpy(l.data, src, k);
    l.flag.store(flagOf(nextLine_, k), std::memory_order_release);
    ++nextLine_;
    flushed_ += k;
    src += k;
  }
  LlLine& l = tx_->lines[first % kLlLines];
  memcpy(l.data, stage, k0);
  l.flag.store(flagOf(first, k0, nextLine_ - first), std::memory_order_release);
}

// Copies whole lines that have arrived into the private buffer (kept 64-byte
// aligned to the stream, so payload stays aligned for reductions), then
// tells the writer how many lines it may reuse.
void LlConn::gather() {
  if (consumed_ == gathered_) stageBase_ = consumed_ & ~uint64_t(63);
  if (gathered_ - stageBase_ + kLlLineData > kLlStage && consumed_ - stageBase_ >= 64) {
    const uint64_t base = consumed_ & ~uint64_t(63);
    memmove(inStage_ + (consumed_ - base), inStage_ + (consumed_ - stageBase_), gathered_ - consumed_);
    stageBase_ = base;
  }
  const uint64_t before = readLine_;
  // Once a flush's first line is here, the rest of it is too: fetch them
  // all at once (its flag says how many there are).
  const uint64_t f0 = rx_->lines[readLine_ % kLlLines].flag.load(std::memory_order_acquire);
  if (f0 && lineOf(f0) == readLine_)
    for (uint64_t k = 1; k < std::min<uint64_t>(f0 >> 6 & 63, 9); ++k)
      __builtin_prefetch(&rx_->lines[(readLine_ + k) % kLlLines]);
  for (;;) {
    const LlLine& l = rx_->lines[readLine_ % kLlLines];
    const uint64_t f = l.flag.load(std::memory_order_acquire);
    const size_t valid = f & 63;
    if (!f || lineOf(f) != readLine_ || valid > kLlStage - (gathered_ - stageBase_)) break;
    memcpy(inStage_ + (gathered_ - stageBase_), l.data, valid);
    gathered_ += valid;
    ++readLine_;
  }
  if (readLine_ != before) rx_->freed.store(readLine_, std::memory_order_release);
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
