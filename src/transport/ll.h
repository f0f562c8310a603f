// The low-latency (LL) stream of a shared-memory connection: small
// operations' bytes cross in 64-byte lines whose last 8 bytes are a flag
// (the line's number and how many of its 56 data bytes are valid; each
// flush starts a fresh line and writes every line once), so the
// reader's one cache miss on the flag brings the data with it and no head,
// tail or separate flag word is written per message (NCCL's LL128 idea, with
// x86-TSO / release-acquire ordering standing in for 128-byte stores).
//
// It is a Conn like any other (the engine's descriptor and
// reduce-out-of-the-receive-buffer machinery run on it unchanged; records
// are 8-aligned, so no padding crosses), the small sibling of its shm
// connection (Conn::small): the executor moves an operation's steps onto it
// when the operation is small (takeSmallChannels in engine/program.h, called by the executor).
// The reader gathers whole lines into a private buffer (recvAvail's
// contiguous view); the writer's sendSpace is a private buffer that flush()
// (when advance() stops) spreads over lines.  Lines gathered are returned
// to the writer through one counter the writer reads only when it believes
// the ring full.  No allocation, syscall or lock on the path.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace tern {

constexpr size_t kLlLineData = 56;     // data bytes per 64-byte line
constexpr size_t kLlLines = 1024;      // lines per direction (56 KiB of data)
constexpr size_t kLlStage = 16 << 10;  // private buffer per side

struct alignas(64) LlLine {
  char data[kLlLineData];
  std::atomic<uint64_t> flag;  // line number + 1, lines in its flush, valid bytes (ll.cc); 0: never written
};
static_assert(sizeof(LlLine) == 64, "an LL line is one cache line");

// One direction in shared memory: the lines, and the count of lines the
// reader has gathered (written by the reader, read by the writer).
struct LlRing {
  LlLine lines[kLlLines];
  alignas(64) std::atomic<uint64_t> freed;  // lines gathered so far
};

// Bytes of shared memory one direction needs (zeroed memory is an empty ring).
constexpr size_t llFootprint() { return sizeof(LlRing); }

class LlConn : public Conn {
 public:
  // `owner`: the shm connection whose small sibling this is (its liveness
  // and byte counts); `mine`: the ring this rank reads, `theirs`: the one it
  // writes; `limit`: the largest operation (bytes) both ends send this way.
  void attach(Conn* owner, void* mine, void* theirs, size_t limit);
  const char* name() const override { return "shm-ll"; }
  size_t sendSpace(char** p) override;
  void sendCommit(size_t n) override;
  size_t recvAvail(const char** p) override;
  void recvConsume(size_t n) override;
  void flush() override;
  size_t recordAlign() const override { return 8; }
  uint64_t sendPos() const override { return sent_; }
  uint64_t recvPos() const override { return consumed_; }
  size_t limit() const { return limit_; }

 private:
  void gather();
  LlRing* rx_ = nullptr;
  LlRing* tx_ = nullptr;
  size_t limit_ = 0;
  uint64_t sent_ = 0;        // bytes committed (stream position)
  uint64_t flushed_ = 0;     // bytes written to the lines
  uint64_t nextLine_ = 0;    // the next line the writer fills
  uint64_t freedSeen_ = 0;   // the reader's `freed` as last read
  uint64_t readLine_ = 0;    // the next line the reader gathers
  uint64_t gathered_ = 0;    // bytes copied out of the ring
  uint64_t consumed_ = 0;    // bytes released by the engine
  uint64_t stageBase_ = 0;   // stream position of inStage_[0]
  alignas(64) char outStage_[kLlStage];
  alignas(64) char inStage_[kLlStage];
};

}  // namespace tern
