// The CUDA memory type: MemOps whose every call is a kernel or copy on the
// operation's work stream, with fences the executor polls (memory.h, "Async
// contract").  begin() makes the work stream wait for the caller's stream
// (an event, on the device) and holds the caller's stream (stream_hold.h)
// until end().  Fences are CUDA events recorded on the work stream, reused
// from a small ring: a ring slot is only recorded again once the fence it
// held is known done.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "codec/ternary_cuda.h"
#include "memory/buffer_kind.h"
#include "memory/cuda_ipc.h"
#include "memory/cuda_reduce.h"
#include "memory/cuda_runtime_probe.h"
#include "memory/fence_ring.h"
#include "memory/host_staging.h"
#include "memory/memory.h"
#include "memory/staging_pool.h"
#include "memory/ternary_sync_table.h"
#include "memory/stream_hold.h"
#include "memory/work_streams.h"

namespace tern {

namespace {

// One of the pooled events (work_streams.h): made there only when none is spare.
cudaError_t takeEvent(cudaEvent_t* e) {
  void* v = nullptr;
  const int r = borrowEvent(&v);
  *e = static_cast<cudaEvent_t>(v);
  return static_cast<cudaError_t>(r);
}

// The ring's events: CUDA events on the work stream, taken from the pool
// up front (create()) or, where an operation skipped that, at first use.
struct CudaEvents {
  cudaStream_t s;
  cudaEvent_t ev[FenceRing<CudaEvents>::kSlots] = {};

  explicit CudaEvents(cudaStream_t stream) : s(stream) {}
  ~CudaEvents() {
    for (cudaEvent_t e : ev)
      giveBackEvent(e);
  }
  int create() {
    for (cudaEvent_t& e : ev)
      if (!e)
        if (cudaError_t r = takeEvent(&e)) return r;
    return 0;
  }
  int record(unsigned k) {
    if (!ev[k])
      if (cudaError_t e = takeEvent(&ev[k])) return e;
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

// Runs a call on the buffers' device and puts the thread's device back: the
// executor's threads (and a caller's thread that drives) may be on another.
class OnDevice {
 public:
  explicit OnDevice(int dev) {
    if (dev < 0 || cudaGetDevice(&prev_) != cudaSuccess || prev_ == dev) return;
    if (cudaSetDevice(dev) == cudaSuccess) set_ = true;
  }
  ~OnDevice() {
    if (set_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
  bool set_ = false;
};

// Device scratch for operands in host memory (a fifo slot): a kernel reads
// device memory only.  Blocks are lent per device and kept between
// operations (never allocated per call), like the pinned staging.
struct Scratch {
  void* p = nullptr;
  size_t slot = 0;  // bytes per slot (three slots), a multiple of 256
};

void* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void deviceRelease(void* p) { cudaFree(p); }

// The current device's pool (operations call it on their buffers' device).
StagingPool* deviceScratchPool() {
  static std::mutex m;
  static std::map<int, StagingPool*>* pools = new std::map<int, StagingPool*>;  // never freed
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lk(m);
  StagingPool*& p = (*pools)[dev];
  if (!p) p = new StagingPool({deviceAlloc, deviceRelease}, 4);
  return p;
}

class CudaOps : public MemOps {
 public:
  CudaOps(void* user, void* work, int dev)
      : user_(static_cast<cudaStream_t>(user)), s_(static_cast<cudaStream_t>(work)), dev_(dev),
        events_(s_), ring_(events_) {}
  ~CudaOps() override {
    OnDevice on(dev_);
    end();  // never leave the caller's stream waiting
    giveBackEvent(after_);
    for (void* p : late_) cudaFreeAsync(p, s_);
    if (pinned_.p || !blocks_.empty() || !late_.empty()) {
      // Idle after a completed operation; a failure can leave work queued,
      // and what goes back to the pools must be idle.
      cudaStreamSynchronize(s_);
      for (const StagingPool::Buffer& b : blocks_) deviceScratchPool()->giveBack(b);
      if (pinned_.p) pinnedStagingPool()->giveBack(pinned_);
    }
    giveBackWorkStream(s_);
  }

  void follow() const override;
  void hold() const override;
  bool ready() const override;
  void end() const override {
    if (hold_) hold_->release();
  }

  MemType type() const override { return MemType::Cuda; }
  void* stream() const override { return s_; }

  // Between device and host memory (a fifo slot, a task's vector) bytes go
  // through the pinned ring (staging below): nothing waits on the host.
  void copy(void* dst, const void* src, size_t bytes) const override;
  void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
              ternRedOp_t op, int avgDivisor) const override;
  void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const override {
    OnDevice on(dev_);
    check(cudaDivide(buf, count, dt, divisor, s_), "divide");
  }
  // The scalar in host memory goes through the staging ring in stream
  // order, so it is read when the stream gets there, as a device one is.
  void scale(void* dst, const void* src, size_t count, ternDataType_t dt,
             const void* scalar) const override;
  void* scratch(size_t bytes) const override {
    OnDevice on(dev_);
    return block(bytes);
  }
  // The function-pointer table cannot carry this operation's stream: the
  // data path calls ternaryEncode/AddEncode/Decode below; the table is the
  // same kernels made synchronous, correct for callers not yet moved over.
  const TernaryKernels& ternary() const override { return ternaryCudaSyncKernels(); }
  // The codec's planes come from and go to fifo slots (host memory) and its
  // scales are a host vector: staged (pinned ring, device scratch), so the
  // codes are all that crosses PCIe (the gradient and the result stay on
  // the device).
  void ternaryEncode(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) const override;
  void ternaryAddEncode(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes,
                        int win, uint32_t* out, int wout) const override;
  void ternaryDecode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                     uint32_t block, size_t count, ternDataType_t dt, int avgN,
                     void* dst) const override;
  void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                         float* maxAbs, float* sumSq) const override;
  std::shared_ptr<float> persistentZeros(size_t count) const override;

  uint64_t fence() const override;
  bool done(uint64_t f) const override;
  bool ipcExport(const void* p, IpcHandle* h, uint64_t* offset) const override {
    OnDevice on(dev_);
    return exportCudaBuffer(p, h, offset);
  }
  void* ipcOpen(const IpcHandle& h, std::string* why) const override {
    OnDevice on(dev_);
    return ipcAcquire(h, [&h](std::string* w) { return openCudaBuffer(h, w); }, closeCudaBuffer, why);
  }
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

  // Makes, on the caller's thread before the hold, what the progress thread
  // would otherwise make: tern's kernels loaded (lazy loading, CUDA's
  // default since 12.2, loads a kernel at its first launch, and loading
  // may wait for the whole context), the fence events, the pinned ring and
  // a burst's scratch.  After the hold the progress thread must not
  // allocate or load: on an H200 (driver 580) its cudaHostAlloc waited on
  // a driver lock that the caller, blocked in cudaStreamSynchronize on its
  // held stream, kept, and two ranks deadlocked (perf/RESULTS.md,
  // 2026-11-27: GPU checks on an H200, and a two-rank deadlock on device
  // buffers).  cudaFree is worse: it waits for the whole device, held
  // streams included.
  void prepare() const;
  // Device scratch: three slots of at least `bytes` each (false: no memory).
  // Reserve once per call, before taking slots: growing frees the old
  // block (stream-ordered) under slots taken earlier.
  bool reserve(size_t bytes) const;
  char* slot(int k) const { return static_cast<char*>(scratch_.p) + k * scratch_.slot; }
  // A block of device memory kept until the destructor (work queued on the
  // stream may still use a block replaced by a larger one): from the pool
  // before the hold, stream-ordered (cudaMallocAsync on the work stream,
  // freed by cudaFreeAsync) after it.  nullptr when out of memory.
  void* block(size_t bytes) const;
  // After the hold: bytes of stream-ordered memory (cudaMallocAsync on the
  // work stream) into *p.  false before the hold, or where the device has
  // no stream-ordered allocator: the caller allocates as before the hold.
  bool streamOrdered(void** p, size_t bytes) const;
  // p's bytes on the device: p itself if it is device memory, else a copy
  // in slot k (enqueued now).
  const void* in(const void* p, size_t bytes, int k) const;
  // Where a kernel writes what belongs at p: p itself, or slot k, which
  // back() then copies to p.
  void* out(void* p, int k) const { return pointerKind(p) == MemType::Cuda ? p : slot(k); }
  void back(void* p, const void* d, size_t bytes) const {
    if (p != d) toHost(p, d, bytes);
  }

  // Staging: host_staging.h says how bytes cross between host memory and
  // the device with no host function on the stream.  Where no pinned memory
  // exists CUDA copies from / to the pageable memory itself, after the
  // stream's earlier work (correct, but the calling thread waits).
  bool ring() const;  // borrows the pinned ring (false: no pinned memory)
  void toDevice(void* d, const void* host, size_t bytes) const;
  void toHost(void* host, const void* d, size_t bytes) const;
  void hostToHost(void* dst, const void* src, size_t bytes) const;
  // The codec's scales on the device (a copy of a host vector, made once
  // per operation: they are final before the codec runs).
  const float* deviceScales(const float* scales, size_t count, uint32_t block) const;
  TernaryDeviceInput onDevice(const TernaryInput& in) const {
    TernaryDeviceInput d = ternaryDeviceInput(in);
    d.scales = deviceScales(in.scales, in.count, in.block);
    return d;
  }

  cudaStream_t user_;  // the caller's
  cudaStream_t s_;     // this operation's work
  int dev_;            // the buffers' device (-1: the caller's current one)
  mutable Scratch scratch_;
  mutable void* scales_ = nullptr;  // the codec's scales on the device
  mutable std::vector<StagingPool::Buffer> blocks_;  // lent by deviceScratchPool
  mutable std::vector<void*> late_;                  // cudaMallocAsync'ed after the hold
  mutable bool held_ = false;                        // hold() ran: allocate stream-ordered
  mutable StagingPool::Buffer pinned_;  // the staging's memory, lent by the pool
  // The staging's view of this operation: its copies, fences and waits.
  struct StagingDev {
    const CudaOps* ops;
    void toDevice(void* d, const void* pinned, size_t bytes) {
      ops->check(cudaMemcpyAsync(d, pinned, bytes, cudaMemcpyHostToDevice, ops->s_), "copy to device");
    }
    void toHost(void* pinned, const void* d, size_t bytes) {
      ops->check(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost, ops->s_), "copy to host");
    }
    uint64_t fence() { return ops->fence(); }
    void wait(uint64_t f) { ops->check(ops->ring_.wait(f), "fence wait"); }
  };
  mutable StagingDev stagingDev_{this};
  mutable HostStaging<StagingDev> staging_{stagingDev_};
  mutable const float* scalesOf_ = nullptr;  // the host vector scales_ copies
  mutable cudaEvent_t after_ = nullptr;  // the caller's earlier work
  mutable std::unique_ptr<StreamHold> hold_;
  mutable std::mutex m_;
  mutable int err_ = 0;
  mutable char why_[160] = "";
  // Touched by the polling thread only.
  mutable CudaEvents events_;
  mutable FenceRing<CudaEvents> ring_;
};

bool CudaOps::streamOrdered(void** p, size_t bytes) const {
  if (!held_) return false;
  if (cudaMallocAsync(p, bytes, s_) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

void* CudaOps::block(size_t bytes) const {
  void* p = nullptr;
  if (streamOrdered(&p, bytes)) {
    late_.push_back(p);
    return p;
  }
  StagingPool::Buffer b = deviceScratchPool()->borrow(bytes);
  if (!b.p) {
    check(cudaErrorMemoryAllocation, "scratch allocation");
    return nullptr;
  }
  blocks_.push_back(b);
  return b.p;
}

bool CudaOps::reserve(size_t bytes) const {
  const size_t slotBytes = (bytes + 255) / 256 * 256;
  if (slotBytes <= scratch_.slot) return true;
  // Grows to the largest burst once per operation; the old block stays
  // this operation's (work already queued may read it).
  void* p = block(3 * slotBytes);
  if (!p) return false;
  scratch_ = Scratch{p, slotBytes};
  return true;
}

const void* CudaOps::in(const void* p, size_t bytes, int k) const {
  if (pointerKind(p) == MemType::Cuda) return p;
  toDevice(slot(k), p, bytes);
  return slot(k);
}

constexpr size_t kRingBytes = size_t(4) << 20;  // 16 bursts of 256 KiB

bool CudaOps::ring() const {
  if (staging_.attached()) return true;
  StagingPool* pool = pinnedStagingPool();
  if (!pool) return false;
  pinned_ = pool->borrow(kRingBytes);
  if (!pinned_.p) return false;
  staging_.attach(static_cast<char*>(pinned_.p), pinned_.bytes);
  return true;
}

void CudaOps::toDevice(void* d, const void* host, size_t bytes) const {
  countStaged(bytes);
  if (ring()) return staging_.toDevice(d, host, bytes);
  // pageable: CUDA reads the host bytes at once, so the stream must be there first
  check(cudaStreamSynchronize(s_), "stream synchronize");
  check(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, s_), "copy to device");
}

void CudaOps::toHost(void* host, const void* d, size_t bytes) const {
  countStaged(bytes);
  if (ring()) return staging_.toHost(host, d, bytes);
  // pageable: returns once the stream got there and the bytes are in place
  check(cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, s_), "copy to host");
}

// Host to host (a task's vector to a fifo slot): after the staged writes
// to either range, which land on this thread once their fence is reached.
void CudaOps::hostToHost(void* dst, const void* src, size_t bytes) const {
  if (ring()) return staging_.hostToHost(dst, src, bytes);
  check(cudaStreamSynchronize(s_), "stream synchronize");
  memcpy(dst, src, bytes);
}

void CudaOps::copy(void* dst, const void* src, size_t bytes) const {
  if (!bytes) return;
  OnDevice on(dev_);
  const bool toDev = pointerKind(dst) == MemType::Cuda, fromDev = pointerKind(src) == MemType::Cuda;
  if (toDev && fromDev) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s_), "copy");
  else if (toDev) toDevice(dst, src, bytes);
  else if (fromDev) toHost(dst, src, bytes);
  else hostToHost(dst, src, bytes);
}

const float* CudaOps::deviceScales(const float* scales, size_t count, uint32_t block) const {
  if (pointerKind(scales) == MemType::Cuda) return scales;
  if (scalesOf_ == scales) return static_cast<const float*>(scales_);
  const size_t bytes = (count + block - 1) / block * sizeof(float);
  scales_ = this->block(bytes);
  if (!scales_) return nullptr;
  toDevice(scales_, scales, bytes);
  scalesOf_ = scales;
  return static_cast<const float*>(scales_);
}

// Operands in host memory (the fifo slot a peer's bytes arrived in, the
// fifo slot the result goes to) pass through device scratch: the kernel
// touches device memory only.
void CudaOps::reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
                     ternRedOp_t op, int avgDivisor) const {
  OnDevice on(dev_);
  const size_t bytes = count * ternTypeSize(dt);
  if (!reserve(bytes)) return;
  void* o = out(dst, 2);
  check(cudaReduce(o, in(a, bytes, 0), in(b, bytes, 1), count, dt, op, avgDivisor, s_), "reduce");
  back(dst, o, bytes);
}

void CudaOps::scale(void* dst, const void* src, size_t count, ternDataType_t dt,
                    const void* scalar) const {
  OnDevice on(dev_);
  if (!reserve(ternTypeSize(dt))) return;
  // A slot holds the (staged) scalar; the input and the output are device
  // memory (the caller's send buffer and scratch(): api/premul.cc).
  check(cudaScale(dst, src, count, dt, in(scalar, ternTypeSize(dt), 0), s_), "scale");
}

void CudaOps::ternaryEncode(const TernaryInput& x, size_t g0, size_t n, uint32_t* dst) const {
  OnDevice on(dev_);
  const size_t bytes = n * 2 * 4;
  if (!reserve(bytes)) return;
  auto* o = static_cast<uint32_t*>(out(dst, 2));
  check(ternaryCudaEncode(onDevice(x), g0, n, o, s_), "ternary encode");
  back(dst, o, bytes);
}

void CudaOps::ternaryAddEncode(const TernaryInput& x, size_t g0, size_t n, const uint32_t* planes,
                               int win, uint32_t* dst, int wout) const {
  OnDevice on(dev_);
  const size_t inBytes = n * 4 * win, outBytes = n * 4 * wout;
  if (!reserve(std::max(inBytes, outBytes))) return;
  auto* p = static_cast<const uint32_t*>(in(planes, inBytes, 0));
  auto* o = static_cast<uint32_t*>(out(dst, 2));
  check(ternaryCudaAddEncode(onDevice(x), g0, n, p, win, o, wout, s_), "ternary add-encode");
  back(dst, o, outBytes);
}

void CudaOps::ternaryDecode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                            uint32_t block, size_t count, ternDataType_t dt, int avgN,
                            void* dst) const {
  OnDevice on(dev_);
  const size_t bytes = n * 4 * w;
  if (!reserve(bytes)) return;
  auto* p = static_cast<const uint32_t*>(in(planes, bytes, 0));
  check(ternaryCudaDecode(p, w, g0, n, deviceScales(scales, count, block), block, count, dt, avgN,
                          dst, s_),
        "ternary decode");
}

// Its own allocation (not a pool's: it outlives the operation), zeroed on
// the work stream; freed on its own device.  cudaFree waits for the device,
// so no kernel still using it is cut short (it runs when a tensor's
// residual is replaced or its communicator destroyed, not on a held stream's
// path).
std::shared_ptr<float> CudaOps::persistentZeros(size_t count) const {
  OnDevice on(dev_);
  int dev = 0;
  cudaGetDevice(&dev);
  void* v = nullptr;
  if (!streamOrdered(&v, count * sizeof(float))) v = deviceAlloc(count * sizeof(float));
  auto* p = static_cast<float*>(v);
  if (!p) return nullptr;
  check(cudaMemsetAsync(p, 0, count * sizeof(float), s_), "zeroing error feedback residuals");
  return std::shared_ptr<float>(p, [dev](float* q) {
    OnDevice on(dev);
    deviceRelease(q);
  });
}

// Block maxima (and sums of squares) into host vectors: the allreduce of
// the scales that follows is small, and the clip needs them on the host.
void CudaOps::ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                                float* maxAbs, float* sumSq) const {
  OnDevice on(dev_);
  const size_t bytes = (count + block - 1) / block * sizeof(float);
  if (!reserve(bytes)) return;
  auto* m = static_cast<float*>(out(maxAbs, 0));
  auto* q = sumSq ? static_cast<float*>(out(sumSq, 1)) : nullptr;
  check(cudaBlockStats(g, dt, count, block, m, q, s_), "ternary block stats");
  back(maxAbs, m, bytes);
  if (sumSq) back(sumSq, q, bytes);
}

bool CudaOps::ready() const {
  if (failed() || !after_) return true;  // failed work is never waited on
  cudaError_t q = cudaEventQuery(after_);
  if (q == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(q, "caller's stream");
  return true;
}

// The largest burst the executor hands over (engine/program.cc kBurst);
// larger requests still work, with stream-ordered memory.
constexpr size_t kPreparedBurst = size_t(256) << 10;

// tern's kernels, loaded once per device on a caller's thread.
void preloadKernels() {
  static std::mutex m;
  static std::vector<int> loaded;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lk(m);
  if (std::find(loaded.begin(), loaded.end(), dev) != loaded.end()) return;
  loaded.push_back(dev);
  cudaPreloadReduceKernels();
  ternaryCudaPreload();
}

void CudaOps::prepare() const {
  preloadKernels();
  check(events_.create(), "event create");
  ring();
  reserve(kPreparedBurst);
}

void CudaOps::follow() const {
  OnDevice on(dev_);
  prepare();
  if (!after_) check(takeEvent(&after_), "event create");
  if (!after_) return;
  check(cudaEventRecord(after_, user_), "event record");
  check(cudaStreamWaitEvent(s_, after_, 0), "stream wait");
}

void CudaOps::hold() const {
  OnDevice on(dev_);
  if (hold_) return;
  hold_ = StreamHold::make();
  if (!hold_) {
    check(cudaErrorMemoryAllocation, "stream hold (no flag slot)");
    return;
  }
  check(hold_->hold(user_), "stream hold");
  held_ = true;
}

uint64_t CudaOps::fence() const {
  OnDevice on(dev_);
  int e = 0;
  const uint64_t f = ring_.fence(&e);
  check(e, "fence");
  staging_.fenced(f);  // pieces taken from now on are the next fence's
  return f;
}

bool CudaOps::done(uint64_t f) const {
  if (failed()) return true;  // failed work never completes: nobody waits on it
  OnDevice on(dev_);
  int e = 0;
  const bool reached = ring_.done(f, &e);
  check(e, "fence");
  if (reached) staging_.reached(f);  // the staged writes land, their pieces are free
  return reached;
}

}  // namespace

std::unique_ptr<MemOps> makeCudaOps(void* stream, int device) {
  if (!cudaUsable()) return nullptr;
  OnDevice on(device);
  void* work = borrowWorkStream();
  if (!work) return nullptr;
  return std::make_unique<CudaOps>(stream, work, device);
}

}  // namespace tern
