// Bytes between host memory (a fifo slot, a task's vector) and the device,
// through one pinned buffer, with no host function on the stream.
//
// Why no host function: after an operation holds the caller's stream, the
// progress thread must not call the driver for anything that takes the
// context's write lock, and cudaLaunchHostFunc does. A caller blocked in
// the driver on its held stream keeps that lock: a copy to pageable memory
// (`tensor.cpu()`), a synchronize. Then the progress thread waits for the
// caller, and the caller waits for the hold the progress thread would lift.
// This deadlocked two ranks on an H200 (perf/RESULTS.md, 2026-12-04: GPU
// checks on an H200). So the host side of each copy runs on the progress
// thread itself:
//   to the device:  memcpy host -> pinned piece now, then an async copy
//                   piece -> device on the work stream;
//   to the host:    an async copy device -> piece now, and the memcpy
//                   piece -> host once the fence after it is reached
//                   (reached(), called by the memory type's done());
//   host to host:   memcpy now.
// What stream order gave the host functions, the ranges give here: a host
// read or write that overlaps a write still waiting for its fence settles
// first (a fence now, waited for). Settling is rare (a burst that reads back
// its own result) and brief: the work stream never waits on the host.
//
// The device is a parameter, so the bookkeeping is tested without a GPU
// (tests/test_memory.cc):
//   Dev::toDevice(void* d, const void* pinned, size_t bytes),
//   Dev::toHost(void* pinned, const void* d, size_t bytes): enqueue a copy;
//   Dev::fence() -> uint64_t: a fence after everything enqueued (the memory
//       type's fence(), which calls fenced() here);
//   Dev::wait(uint64_t f): returns once fence f is reached.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>

#include "memory/staging_ring.h"

namespace tern {

template <class Dev>
class HostStaging {
 public:
  explicit HostStaging(Dev& dev) : dev_(dev) {}

  // The pinned buffer (lent by the pool; the caller gives it back).
  void attach(char* pinned, size_t bytes) {
    base_ = pinned;
    ring_ = std::make_unique<StagingRing>(bytes);
    maxPiece_ = ring_->capacity() / 4;
  }
  bool attached() const { return base_ != nullptr; }

  void toDevice(void* d, const void* host, size_t bytes) {
    settleIfPending(host, bytes);
    for (size_t at = 0; at < bytes; at += maxPiece_) {
      const size_t n = bytes - at < maxPiece_ ? bytes - at : maxPiece_;
      char* p = take(n);
      memcpy(p, static_cast<const char*>(host) + at, n);
      dev_.toDevice(static_cast<char*>(d) + at, p, n);
    }
  }

  void toHost(void* host, const void* d, size_t bytes) {
    settleIfPending(host, bytes);  // two writes to one place land in order
    for (size_t at = 0; at < bytes; at += maxPiece_) {
      const size_t n = bytes - at < maxPiece_ ? bytes - at : maxPiece_;
      char* p = take(n);
      dev_.toHost(p, static_cast<const char*>(d) + at, n);
      writes_.push_back({next_, static_cast<char*>(host) + at, p, n});
    }
  }

  void hostToHost(void* dst, const void* src, size_t bytes) {
    settleIfPending(src, bytes);
    settleIfPending(dst, bytes);
    memcpy(dst, src, bytes);
  }

  // Fence f was just taken: pieces taken from now on are the next one's.
  void fenced(uint64_t f) { next_ = f + 1; }

  // Fence f is reached: the writes it covers land, its pieces are free.
  void reached(uint64_t f) {
    while (!writes_.empty() && writes_.front().fence <= f) {
      const Write& w = writes_.front();
      memcpy(w.dst, w.src, w.bytes);
      writes_.pop_front();
    }
    if (ring_) ring_->release(f);
  }

  size_t pendingWrites() const { return writes_.size(); }
  size_t settles() const { return settles_; }

 private:
  struct Write {
    uint64_t fence;
    char* dst;
    const char* src;
    size_t bytes;
  };

  // A piece for the next fence; a full ring settles (everything taken so far
  // is then free) and takes again.
  char* take(size_t bytes) {
    size_t off = ring_->take(bytes, next_);
    if (off == StagingRing::kNone) {
      settle();
      off = ring_->take(bytes, next_);
    }
    return base_ + off;  // an empty ring always has maxPiece_ bytes
  }

  void settleIfPending(const void* p, size_t bytes) {
    const char* a = static_cast<const char*>(p);
    for (const Write& w : writes_)
      if (a < w.dst + w.bytes && w.dst < a + bytes) return settle();
  }

  void settle() {
    ++settles_;
    const uint64_t f = dev_.fence();
    dev_.wait(f);
    reached(f);
  }

  Dev& dev_;
  char* base_ = nullptr;
  std::unique_ptr<StagingRing> ring_;
  size_t maxPiece_ = 0;
  std::deque<Write> writes_;
  uint64_t next_ = 1;
  size_t settles_ = 0;
};

}  // namespace tern
