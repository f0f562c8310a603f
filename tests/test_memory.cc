// The memory-type layer's CPU-checkable parts: choosing an operation's
// memory type from its buffers, pointerKind on host memory (in a build with
// CUDA it asks the CUDA runtime, which must answer "host" and not crash on a
// machine without a driver), the host type's async defaults, and the pinned
// staging pool's bookkeeping (with malloc standing in for cudaHostAlloc:
// the bookkeeping is the same, pinning needs a driver).  The device side is
// tests/test_memory_cuda.cu, run by perf/gpu/run.sh.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "codec/half.h"
#include "memory/buffer_kind.h"
#include "memory/fence_ring.h"
#include "memory/host_staging.h"
#include "memory/memory.h"
#include "memory/staging_pool.h"
#include "memory/staging_ring.h"
#ifdef TERN_WITH_CUDA
#include "memory/cuda_runtime_probe.h"
#endif

namespace tern {
namespace {

TEST(MemTypeForBuffers, AllHostIsHost) {
  MemType t = MemType::Cuda;
  std::string why;
  EXPECT_TRUE(memTypeForBuffers({{"sendbuff", MemType::Host}, {"recvbuff", MemType::Host}}, &t, &why));
  EXPECT_EQ(t, MemType::Host);
  EXPECT_TRUE(why.empty());
}

TEST(MemTypeForBuffers, AllDeviceIsCuda) {
  MemType t = MemType::Host;
  std::string why;
  EXPECT_TRUE(memTypeForBuffers({{"sendbuff", MemType::Cuda}, {"recvbuff", MemType::Cuda}}, &t, &why));
  EXPECT_EQ(t, MemType::Cuda);
}

TEST(MemTypeForBuffers, NoBuffersIsHost) {
  MemType t = MemType::Cuda;
  std::string why;
  EXPECT_TRUE(memTypeForBuffers({}, &t, &why));
  EXPECT_EQ(t, MemType::Host);
}

TEST(MemTypeForBuffers, MixIsRefusedWithOneSentence) {
  MemType t;
  std::string why;
  EXPECT_FALSE(memTypeForBuffers({{"sendbuff", MemType::Cuda}, {"recvbuff", MemType::Host}}, &t, &why));
  EXPECT_EQ(why, "sendbuff is device memory but recvbuff is host memory");
  why.clear();
  EXPECT_FALSE(memTypeForBuffers(
      {{"sendbuff", MemType::Host}, {"recvbuff", MemType::Host}, {"scratch", MemType::Cuda}}, &t, &why));
  EXPECT_EQ(why, "sendbuff is host memory but scratch is device memory");
}

TEST(PointerKind, HostMemoryIsHost) {
  std::vector<float> heap(1 << 16);
  int stack = 0;
  void* big = malloc(64 << 20);
  EXPECT_EQ(pointerKind(heap.data()), MemType::Host);
  EXPECT_EQ(pointerKind(&stack), MemType::Host);
  EXPECT_EQ(pointerKind(big), MemType::Host);
  EXPECT_EQ(pointerKind(nullptr), MemType::Host);
  EXPECT_EQ(pointerKind(reinterpret_cast<void*>(0x10)), MemType::Host);  // not even mapped
  free(big);
}

TEST(MemOpsAsync, HostTypeIsSynchronous) {
  const MemOps* h = memOps(MemType::Host);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->stream(), nullptr);
  EXPECT_EQ(h->fence(), 0u);
  EXPECT_TRUE(h->done(h->fence()));
  EXPECT_EQ(h->error(), ternSuccess);
  EXPECT_EQ(memOps(MemType::Cuda), nullptr);  // device ops come bound to a stream
}

// The codec through MemOps is the host table's codec on host memory.
TEST(MemOpsAsync, HostCodecCallsAreTheTable) {
  const MemOps& h = *memOps(MemType::Host);
  const size_t count = 1000, groups = (count + 31) / 32;
  const uint32_t block = 64;
  std::vector<float> g(count), s((count + block - 1) / block), viaOps(count), viaTable(count);
  for (size_t i = 0; i < count; ++i) g[i] = static_cast<float>(static_cast<int>(i % 37) - 18) / 7.f;
  h.ternaryBlockStats(g.data(), ternFloat32, count, block, s.data(), nullptr);
  TernaryInput in{g.data(), ternFloat32, count, s.data(), block, ternaryKey(1, 2, 3)};
  std::vector<uint32_t> a(2 * groups), b(2 * groups), a3(3 * groups), b3(3 * groups);
  h.ternaryEncode(in, 0, groups, a.data());
  h.ternary().encode(in, 0, groups, b.data());
  EXPECT_EQ(a, b);
  h.ternaryAddEncode(in, 0, groups, a.data(), 2, a3.data(), 3);
  h.ternary().addEncode(in, 0, groups, b.data(), 2, b3.data(), 3);
  EXPECT_EQ(a3, b3);
  h.ternaryDecode(a3.data(), 3, 0, groups, s.data(), block, count, ternFloat32, 2, viaOps.data());
  h.ternary().decode(b3.data(), 3, 0, groups, s.data(), block, count, ternFloat32, 2, viaTable.data());
  EXPECT_EQ(viaOps, viaTable);
}

// A PreMulSum's scaling as NCCL computes it: integers wrap (int8 200 * 3),
// 16-bit floats are multiplied in float32 and rounded once, and the scalar
// is one element applied to all.
TEST(MemOpsScale, WrapsIntegersAndRoundsHalvesOnce) {
  const MemOps& h = *memOps(MemType::Host);
  const uint8_t u[3] = {200, 1, 255}, three = 3;
  uint8_t uo[3];
  h.scale(uo, u, 3, ternUint8, &three);
  EXPECT_EQ(uo[0], 88);  // 600 mod 256
  EXPECT_EQ(uo[1], 3);
  EXPECT_EQ(uo[2], 253);
  const int32_t big[2] = {0x7fffffff, -7}, two = 2;
  int32_t bo[2];
  h.scale(bo, big, 2, ternInt32, &two);
  EXPECT_EQ(bo[0], -2);
  EXPECT_EQ(bo[1], -14);
  // 1 + 2^-10 (the float16 after 1) times 1 + 2^-10: float32 has the exact
  // 1 + 2^-9 + 2^-20, which rounds once to 1 + 2^-9.
  const uint16_t h1 = floatToHalf(1.0f + 1.0f / 1024), k = h1;
  uint16_t ho;
  h.scale(&ho, &h1, 1, ternFloat16, &k);
  EXPECT_EQ(halfToFloat(ho), 1.0f + 1.0f / 512);
  const float f[4] = {1, -2, 0.5f, 3}, fk = -1.5f;
  float fo[4];
  h.scale(fo, f, 4, ternFloat32, &fk);
  EXPECT_EQ(fo[0], -1.5f);
  EXPECT_EQ(fo[1], 3.0f);
  EXPECT_EQ(fo[2], -0.75f);
  EXPECT_EQ(fo[3], -4.5f);
}

// Without a device (this machine, or a build without CUDA) there is no
// device memory type and no pinned pool; with one, both exist.
TEST(MemOpsAsync, CudaOpsExistOnlyWithADevice) {
#ifdef TERN_WITH_CUDA
  const bool device = cudaUsable();
#else
  const bool device = false;
#endif
  std::unique_ptr<MemOps> ops = makeCudaOps(nullptr);
  EXPECT_EQ(ops != nullptr, device);
  if (ops) EXPECT_EQ(ops->type(), MemType::Cuda);
  EXPECT_EQ(pinnedStagingPool() != nullptr, device);
}

// A simulated device for the fence ring: a fence recorded at step t is
// reached once the device clock passes t; wait() advances the clock to it.
struct SimEvents {
  uint64_t clock = 0, enqueued = 0;
  uint64_t at[FenceRing<SimEvents>::kSlots] = {};
  int waits = 0, failAtQuery = 0;  // failAtQuery: that slot's query fails
  int record(unsigned k) {
    at[k] = ++enqueued;
    return 0;
  }
  int query(unsigned k) {
    if (failAtQuery && k == static_cast<unsigned>(failAtQuery)) return 700;  // an illegal address
    return at[k] <= clock ? 0 : FenceRing<SimEvents>::kNotReady;
  }
  int wait(unsigned k) {
    ++waits;
    if (clock < at[k]) clock = at[k];
    return 0;
  }
};

TEST(FenceRing, DoneOnlyWhenTheDeviceReachedIt) {
  SimEvents dev;
  FenceRing<SimEvents> ring(dev);
  int err = 0;
  uint64_t f1 = ring.fence(&err), f2 = ring.fence(&err), f3 = ring.fence(&err);
  EXPECT_EQ(err, 0);
  EXPECT_LT(f1, f2);
  EXPECT_LT(f2, f3);
  EXPECT_FALSE(ring.done(f1, &err));
  dev.clock = 2;
  EXPECT_TRUE(ring.done(f1, &err));
  EXPECT_TRUE(ring.done(f2, &err));
  EXPECT_FALSE(ring.done(f3, &err));
  dev.clock = 3;
  EXPECT_TRUE(ring.done(f3, &err));
  EXPECT_TRUE(ring.done(f1, &err));  // earlier fences stay done
  EXPECT_EQ(err, 0);
  EXPECT_EQ(dev.waits, 0);  // polling never blocks
}

TEST(FenceRing, AFullRingWaitsForItsOldestFenceOnly) {
  SimEvents dev;
  FenceRing<SimEvents> ring(dev);
  int err = 0;
  std::vector<uint64_t> f;
  for (uint64_t i = 0; i < FenceRing<SimEvents>::kSlots; ++i) f.push_back(ring.fence(&err));
  EXPECT_EQ(dev.waits, 0);
  f.push_back(ring.fence(&err));  // reuses the first fence's slot
  EXPECT_EQ(dev.waits, 1);
  EXPECT_EQ(dev.clock, 1u);  // waited for the oldest only
  EXPECT_TRUE(ring.done(f[0], &err));
  EXPECT_FALSE(ring.done(f[1], &err));
  EXPECT_FALSE(ring.done(f.back(), &err));
  dev.clock = dev.enqueued;
  EXPECT_TRUE(ring.done(f.back(), &err));
  for (int i = 0; i < 1000; ++i) {  // many bursts: stays bounded, in order
    uint64_t g = ring.fence(&err);
    dev.clock = dev.enqueued;
    EXPECT_TRUE(ring.done(g, &err));
  }
  EXPECT_EQ(dev.waits, 1);
  EXPECT_EQ(err, 0);
}

// wait(f) blocks on f's event alone and marks every earlier fence done.
TEST(FenceRing, WaitBlocksOnItsFenceAlone) {
  SimEvents dev;
  FenceRing<SimEvents> ring(dev);
  int err = 0;
  uint64_t f1 = ring.fence(&err), f2 = ring.fence(&err), f3 = ring.fence(&err);
  EXPECT_EQ(ring.wait(f2), 0);
  EXPECT_EQ(dev.waits, 1);
  EXPECT_EQ(dev.clock, 2u);
  EXPECT_TRUE(ring.done(f1, &err));
  EXPECT_TRUE(ring.done(f2, &err));
  EXPECT_FALSE(ring.done(f3, &err));
  EXPECT_EQ(ring.wait(f1), 0);  // already done: no wait
  EXPECT_EQ(dev.waits, 1);
}

TEST(FenceRing, AFailedFenceCountsAsReachedWithItsError) {
  SimEvents dev;
  FenceRing<SimEvents> ring(dev);
  int err = 0;
  uint64_t f1 = ring.fence(&err), f2 = ring.fence(&err);
  dev.failAtQuery = static_cast<int>(FenceRing<SimEvents>::slot(f1));
  EXPECT_TRUE(ring.done(f2, &err));  // stops at the failure: the caller makes it sticky
  EXPECT_EQ(err, 700);
}

// A counting allocator standing in for cudaHostAlloc / cudaFreeHost.
int gAllocs = 0, gFrees = 0;
bool gFail = false;
void* countingAlloc(size_t n) {
  if (gFail) return nullptr;
  ++gAllocs;
  return malloc(n);
}
void countingRelease(void* p) {
  ++gFrees;
  free(p);
}

class StagingPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { gAllocs = gFrees = 0, gFail = false; }
  const size_t MiB = size_t(1) << 20;
};

TEST_F(StagingPoolTest, ReusesABufferInsteadOfAllocatingPerCall) {
  StagingPool pool({countingAlloc, countingRelease}, 4);
  StagingPool::Buffer b = pool.borrow(3 * MiB);
  ASSERT_NE(b.p, nullptr);
  EXPECT_EQ(b.bytes, 4 * MiB);  // rounded up to a power of two
  void* first = b.p;
  pool.giveBack(b);
  for (int call = 0; call < 100; ++call) {  // a training loop's same-sized requests
    StagingPool::Buffer c = pool.borrow(3 * MiB + call);
    EXPECT_EQ(c.p, first);
    pool.giveBack(c);
  }
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(gAllocs, 1);
  EXPECT_EQ(pool.spares(), 1u);
}

TEST_F(StagingPoolTest, SmallRequestsGetAtLeastTheMinimum) {
  StagingPool pool({countingAlloc, countingRelease});
  StagingPool::Buffer b = pool.borrow(100);
  EXPECT_EQ(b.bytes, StagingPool::kMinBytes);
  pool.giveBack(b);
}

TEST_F(StagingPoolTest, TakesTheSmallestSpareThatFits) {
  StagingPool pool({countingAlloc, countingRelease});
  StagingPool::Buffer big = pool.borrow(16 * MiB), small = pool.borrow(2 * MiB);
  pool.giveBack(big);
  pool.giveBack(small);
  StagingPool::Buffer c = pool.borrow(MiB + 1);
  EXPECT_EQ(c.p, small.p);
  StagingPool::Buffer d = pool.borrow(MiB + 1);  // only the big one is left
  EXPECT_EQ(d.p, big.p);
  StagingPool::Buffer e = pool.borrow(MiB);  // none left: a new one
  EXPECT_EQ(pool.allocations(), 3u);
  pool.giveBack(c), pool.giveBack(d), pool.giveBack(e);
}

TEST_F(StagingPoolTest, KeepsAtMostKeepSparesDroppingTheSmallest) {
  {
    StagingPool pool({countingAlloc, countingRelease}, 2);
    StagingPool::Buffer a = pool.borrow(MiB), b = pool.borrow(4 * MiB), c = pool.borrow(8 * MiB);
    pool.giveBack(a), pool.giveBack(b), pool.giveBack(c);
    EXPECT_EQ(pool.spares(), 2u);
    EXPECT_EQ(gFrees, 1);
    StagingPool::Buffer d = pool.borrow(MiB);  // the 1 MiB one went: the 4 MiB serves it
    EXPECT_EQ(d.p, b.p);
    pool.giveBack(d);
  }
  EXPECT_EQ(gFrees, gAllocs);  // the destructor releases what it kept
}

TEST_F(StagingPoolTest, AllocatorFailureIsAnEmptyBuffer) {
  StagingPool pool({countingAlloc, countingRelease});
  gFail = true;
  StagingPool::Buffer b = pool.borrow(MiB);
  EXPECT_EQ(b.p, nullptr);
  EXPECT_EQ(b.bytes, 0u);
  pool.giveBack(b);  // harmless
  EXPECT_EQ(pool.spares(), 0u);
}

// The pinned ring of the CUDA type's staging: pieces come back in fence
// order, a piece never straddles the end, and a full ring says so (its
// caller settles and takes again: host_staging.h).
TEST(StagingRing, PiecesAreFreedByTheirFenceInOrder) {
  StagingRing r(1024);
  EXPECT_EQ(r.take(100, 1), 0u);    // 128 bytes
  EXPECT_EQ(r.take(64, 1), 128u);
  EXPECT_EQ(r.take(500, 2), 192u);  // 512 bytes: up to 704
  EXPECT_EQ(r.take(400, 3), StagingRing::kNone);  // 320 left at the end, nothing at the start
  r.release(0);
  EXPECT_EQ(r.used(), 704u);
  r.release(1);  // the first two pieces
  EXPECT_EQ(r.used(), 512u);
  EXPECT_EQ(r.take(300, 3), 704u);  // 320 bytes: the end is exactly full
  EXPECT_EQ(r.take(100, 3), 0u);    // wraps to the freed start
  EXPECT_EQ(r.take(100, 3), StagingRing::kNone);  // [128, 192) is free but too small
  r.release(3);
  EXPECT_EQ(r.used(), 0u);
  EXPECT_EQ(r.take(1024, 4), 0u);  // empty: starts over, the whole ring fits
  EXPECT_EQ(r.take(1, 4), StagingRing::kNone);
}

TEST(StagingRing, PaddingBeforeAWrapIsFreedWithItsPiece) {
  StagingRing r(1024);
  ASSERT_EQ(r.take(640, 1), 0u);
  ASSERT_EQ(r.take(256, 2), 640u);  // up to 896: 128 left at the end
  r.release(1);                     // [0, 640) free
  EXPECT_EQ(r.take(256, 3), 0u);    // wraps: the 128 bytes at the end are skipped
  EXPECT_EQ(r.used(), 256u + 128u + 256u);
  r.release(2);
  EXPECT_EQ(r.used(), 128u + 256u);  // the wrapped piece and its padding
  r.release(3);
  EXPECT_EQ(r.used(), 0u);
  EXPECT_EQ(r.take(2000, 5), StagingRing::kNone);  // larger than the ring
  EXPECT_EQ(r.take(0, 5), 0u);                     // a record alone still takes a piece
  EXPECT_EQ(r.used(), StagingRing::kAlign);
}

// A device for the host staging: enqueued copies run when the device
// clock passes them; fence f marks the work enqueued before it.
struct QueuedDevice {
  std::vector<std::function<void()>> work;
  size_t ran = 0;
  std::vector<size_t> fences;  // fence f covers work[0, fences[f - 1])
  int waits = 0;
  HostStaging<QueuedDevice>* staging = nullptr;
  void toDevice(void* d, const void* p, size_t n) { work.push_back([=] { memcpy(d, p, n); }); }
  void toHost(void* p, const void* d, size_t n) { work.push_back([=] { memcpy(p, d, n); }); }
  uint64_t fence() {
    fences.push_back(work.size());
    staging->fenced(fences.size());
    return fences.size();
  }
  void wait(uint64_t f) {
    ++waits;
    runTo(fences[f - 1]);
  }
  void runTo(size_t k) {
    while (ran < k) work[ran++]();
  }
  void runAll() { runTo(work.size()); }
};

struct Staged : ::testing::Test {
  explicit Staged(size_t ringBytes = 64 << 10) : pinned(ringBytes), staging(dev) {
    dev.staging = &staging;
    staging.attach(pinned.data(), pinned.size());
  }
  std::vector<char> pinned;
  QueuedDevice dev;
  HostStaging<QueuedDevice> staging;
};

std::vector<char> bytes(size_t n, char first) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(first + i);
  return v;
}

// A copy to the host lands on the polling thread once its fence is
// reached, never before: the executor reads it only after done(fence).
TEST_F(Staged, ACopyToTheHostLandsWhenItsFenceIsReached) {
  std::vector<char> device = bytes(1000, 1), host(1000, 0);
  staging.toHost(host.data(), device.data(), host.size());
  const uint64_t f = dev.fence();
  dev.runAll();
  EXPECT_EQ(host, std::vector<char>(1000, 0));  // the device copied into the piece only
  EXPECT_EQ(staging.pendingWrites(), 1u);
  staging.reached(f);
  EXPECT_EQ(host, device);
  EXPECT_EQ(staging.pendingWrites(), 0u);
  EXPECT_EQ(dev.waits, 0);  // nothing blocked
}

// A copy to the device reads the host bytes at the call (the executor
// keeps them until the fence), so a later change of them does not leak in.
TEST_F(Staged, ACopyToTheDeviceReadsTheHostBytesAtTheCall) {
  std::vector<char> host = bytes(3000, 7), device(3000, 0);
  const std::vector<char> sent = host;
  staging.toDevice(device.data(), host.data(), host.size());
  host.assign(host.size(), 0);
  dev.runAll();
  EXPECT_EQ(device, sent);
  EXPECT_EQ(dev.waits, 0);
}

// A burst that reads back what it just staged to the host (a reduce into a
// fifo slot, then that slot encoded): the read waits for the write, which
// stream order gave the host functions.
TEST_F(Staged, AReadOfAWriteStillInFlightSettlesItFirst) {
  std::vector<char> a = bytes(500, 3), slot(500, 0), b(500, 0), other(500, 0);
  staging.toHost(slot.data(), a.data(), slot.size());
  staging.toDevice(b.data(), slot.data() + 100, 200);  // overlaps the pending write
  EXPECT_EQ(dev.waits, 1);
  EXPECT_EQ(staging.settles(), 1u);
  dev.runAll();
  EXPECT_TRUE(std::equal(b.begin(), b.begin() + 200, a.begin() + 100));
  staging.toHost(slot.data(), a.data(), slot.size());
  staging.hostToHost(other.data(), slot.data(), slot.size());  // host to host waits too
  EXPECT_EQ(other, a);
  staging.toHost(slot.data(), b.data(), 10);
  staging.hostToHost(other.data(), a.data(), 10);  // disjoint: no wait
  EXPECT_EQ(staging.settles(), 2u);
}

// Two writes to one place land in the order they were made.
TEST_F(Staged, TwoWritesToOnePlaceLandInOrder) {
  std::vector<char> first = bytes(64, 1), second = bytes(64, 50), host(64, 0);
  staging.toHost(host.data(), first.data(), 64);
  staging.toHost(host.data(), second.data(), 64);
  const uint64_t f = dev.fence();
  dev.runAll();
  staging.reached(f);
  EXPECT_EQ(host, second);
}

struct SmallRing : Staged {
  SmallRing() : Staged(4096) {}
};

// Copies larger than the ring go in pieces of a quarter of it; a full ring
// settles (its pieces are then all free) and goes on.
TEST_F(SmallRing, LargeCopiesGoInPiecesThroughAFullRing) {
  std::vector<char> host = bytes(10000, 5), device(10000, 0), back(10000, 0);
  staging.toDevice(device.data(), host.data(), host.size());
  EXPECT_GE(staging.settles(), 1u);
  dev.runAll();
  EXPECT_EQ(device, host);
  staging.toHost(back.data(), device.data(), back.size());
  const uint64_t f = dev.fence();
  dev.runAll();
  staging.reached(f);
  EXPECT_EQ(back, host);
  EXPECT_EQ(staging.pendingWrites(), 0u);
}

}  // namespace
}  // namespace tern
