// The CUDA memory type: MemOps whose every call is a kernel or copy on the
// operation's work stream, with fences the executor polls (memory.h, "Async
// contract").  begin() makes the work stream wait for the caller's stream
// (an event, on the device) and holds the caller's stream (stream_hold.h)
// until end().  Fences are CUDA events recorded on the work stream, reused
// from a small ring: a ring slot is only recorded again once the fence it
// held is known done.
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>

#include "codec/ternary_cuda.h"
#include "memory/cuda_reduce.h"
#include "memory/cuda_runtime_probe.h"
#include "memory/fence_ring.h"
#include "memory/memory.h"
#include "memory/stream_hold.h"
#include "memory/work_streams.h"

namespace tern {

namespace {

// The ring's events: CUDA events on the work stream, made on first use.
struct CudaEvents {
  cudaStream_t s;
  cudaEvent_t ev[FenceRing<CudaEvents>::kSlots] = {};

  explicit CudaEvents(cudaStream_t stream) : s(stream) {}
  ~CudaEvents() {
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
  }
  int record(unsigned k) {
    if (!ev[k]) {
      cudaError_t e = cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming);
      if (e != cudaSuccess) return e;
    }
    return cudaEventRecord(ev[k], s);
  }
  int query(unsigned k) {
    cudaError_t q = cudaEventQuery(ev[k]);
    if (q != cudaErrorNotReady) return q;
    cudaGetLastError();  // "not yet" is recorded as the thread's last error: the next
    return FenceRing<CudaEvents>::kNotReady;  // launch check would read it as a failure
  }
  int wait(unsigned k) { return cudaEventSynchronize(ev[k]); }
};

class CudaOps : public MemOps {
 public:
  CudaOps(void* user, void* work)
      : user_(static_cast<cudaStream_t>(user)), s_(static_cast<cudaStream_t>(work)),
        events_(s_), ring_(events_) {}
  ~CudaOps() override {
    end();  // never leave the caller's stream waiting
    if (after_) cudaEventDestroy(after_);
    giveBackWorkStream(s_);
  }

  void begin() const override;
  void end() const override {
    if (hold_) hold_->release();
  }

  MemType type() const override { return MemType::Cuda; }
  void* stream() const override { return s_; }

  // Host ends should be pinned (pinnedStagingPool): to pageable memory CUDA
  // copies synchronously, and the executor would wait behind the stream.
  void copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_), "copy");
  }
  void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
              ternRedOp_t op, int avgDivisor) const override {
    check(cudaReduce(dst, a, b, count, dt, op, avgDivisor, s_), "reduce");
  }
  void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const override {
    check(cudaDivide(buf, count, dt, divisor, s_), "divide");
  }
  // The function-pointer table cannot carry this operation's stream: the
  // data path calls ternaryEncode/AddEncode/Decode below; the table is the
  // same kernels made synchronous, correct for callers not yet moved over.
  const TernaryKernels& ternary() const override { return ternaryCudaSyncKernels(); }
  void ternaryEncode(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) const override {
    check(ternaryCudaEncode(ternaryDeviceInput(in), g0, n, out, s_), "ternary encode");
  }
  void ternaryAddEncode(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes,
                        int win, uint32_t* out, int wout) const override {
    check(ternaryCudaAddEncode(ternaryDeviceInput(in), g0, n, planes, win, out, wout, s_),
          "ternary add-encode");
  }
  void ternaryDecode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                     uint32_t block, size_t count, ternDataType_t dt, int avgN,
                     void* dst) const override {
    check(ternaryCudaDecode(planes, w, g0, n, scales, block, count, dt, avgN, dst, s_),
          "ternary decode");
  }
  void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                         float* maxAbs, float* sumSq) const override {
    check(cudaBlockStats(g, dt, count, block, maxAbs, sumSq, s_), "ternary block stats");
  }
  void ternaryCorrect(const void* g, ternDataType_t dt, const float* residual, size_t count,
                      float* out) const override {
    check(cudaTernaryCorrect(g, dt, residual, count, out, s_), "ternary correct");
  }

  uint64_t fence() const override;
  bool done(uint64_t f) const override;
  ternResult_t error() const override {
    std::lock_guard<std::mutex> lk(m_);
    return err_ ? ternUnhandledCudaError : ternSuccess;
  }
  const char* lastError() const override {
    std::lock_guard<std::mutex> lk(m_);
    return why_;
  }

 private:
  // Records the first failure (sticky): "reduce: an illegal memory access ...".
  void check(int e, const char* what) const {
    if (e == cudaSuccess) return;
    std::lock_guard<std::mutex> lk(m_);
    if (err_) return;
    err_ = e;
    snprintf(why_, sizeof(why_), "CUDA %s failed: %s", what,
             cudaGetErrorString(static_cast<cudaError_t>(e)));
  }
  bool failed() const {
    std::lock_guard<std::mutex> lk(m_);
    return err_ != 0;
  }

  cudaStream_t user_;  // the caller's
  cudaStream_t s_;     // this operation's work
  mutable cudaEvent_t after_ = nullptr;  // the caller's earlier work
  mutable std::unique_ptr<StreamHold> hold_;
  mutable std::mutex m_;
  mutable int err_ = 0;
  mutable char why_[160] = "";
  // Touched by the polling thread only.
  mutable CudaEvents events_;
  mutable FenceRing<CudaEvents> ring_;
};

void CudaOps::begin() const {
  if (!after_) check(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming), "event create");
  if (!after_) return;
  check(cudaEventRecord(after_, user_), "event record");
  check(cudaStreamWaitEvent(s_, after_, 0), "stream wait");
  if (!hold_) hold_ = StreamHold::make();
  if (!hold_) {
    check(cudaErrorMemoryAllocation, "stream hold (no flag slot)");
    return;
  }
  check(hold_->hold(user_), "stream hold");
}

uint64_t CudaOps::fence() const {
  int e = 0;
  const uint64_t f = ring_.fence(&e);
  check(e, "fence");
  return f;
}

bool CudaOps::done(uint64_t f) const {
  if (failed()) return true;  // failed work never completes: nobody waits on it
  int e = 0;
  const bool reached = ring_.done(f, &e);
  check(e, "fence");
  return reached;
}

}  // namespace

std::unique_ptr<MemOps> makeCudaOps(void* stream) {
  if (!cudaUsable()) return nullptr;
  void* work = borrowWorkStream();
  if (!work) return nullptr;
  return std::make_unique<CudaOps>(stream, work);
}

}  // namespace tern
