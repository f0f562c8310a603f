// Makes later work on a CUDA stream wait for the host: the network part of a
// device operation is not on the stream, so the caller's next kernel must
// not start until the executor says the operation's bytes are in place.
// hold() enqueues a wait on a 32-bit flag in mapped pinned memory
// (cuStreamWaitValue32, looked up through the runtime so libcuda is never
// linked; a one-thread spinning kernel where stream memory operations are
// unavailable); release() sets the flag from the host.  Flags are slots of
// one process-wide mapped page, each value only ever grows (GEQ waits), so a
// slot is reused without a stale wait ever seeing a smaller value.
#pragma once
#include <cstdint>
#include <memory>

namespace tern {

// The page's slots one by one, for staged calls (staged.h): the host reads
// and writes a slot with plain loads and stores; a stream waits on it
// (flag >= v, as hold() does) or sets it when it gets there
// (cuStreamWriteValue32, or a one-thread kernel).  0 or the error as int.
bool takeStreamFlag(uint32_t* slot);
void giveBackStreamFlag(uint32_t slot);
volatile uint32_t* streamFlag(uint32_t slot);
int streamWaitFlag(void* stream, uint32_t slot, uint32_t v);
int streamWriteFlag(void* stream, uint32_t slot, uint32_t v);

class StreamHold {
 public:
  // nullptr without a usable device or when every slot is taken.
  static std::unique_ptr<StreamHold> make();
  ~StreamHold();  // releases a hold still in place: a stream never waits forever
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  // Work enqueued on `stream` after this call waits for release().  0 on
  // success, else the cudaError_t / CUresult (as int) of the failed enqueue.
  int hold(void* stream);
  void release();
  bool held() const { return held_; }

 private:
  explicit StreamHold(uint32_t slot) : slot_(slot) {}
  uint32_t slot_;
  uint32_t target_ = 0;
  bool held_ = false;
};

}  // namespace tern
