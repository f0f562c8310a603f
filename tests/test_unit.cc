// White-box unit tests of pieces with a known right answer.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/dtype.h"
#include "base/socket.h"
#include "codec/half.h"
#include "engine/drive_token.h"
#include "engine/operation.h"
#include "engine/program.h"
#include "engine/stream_claims.h"
#include "engine/stream_marks.h"
#include "memory/host_reduce.h"
#include "topology/rdma.h"
#include "transport/fifo.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace tern {
namespace {

// Issue order on a stream shared by ordered operations and interleaved
// messages (a weight stream's chunks): whoever was issued first writes first.
TEST(StreamClaim, WhatWasIssuedFirstWritesFirst) {
  struct Stream final : InertConn {
    const char* name() const override { return "stream"; }
  } c;
  OpPool* pool = new OpPool;  // freed by close() once its operations are gone
  OpPtr chunk = pool->get(), allreduce = pool->get(), later = pool->get();
  pool->close();
  chunk->unordered = true;
  chunk->phase.postedAt = 5;  // pushed at 5
  allreduce->stamp = 7;       // issued at 7
  later->unordered = true;
  later->phase.postedAt = 9;

  // The chunk waits to go without taking the stream (its kernel-queue bound):
  // its reservation keeps the allreduce issued after it off the stream.
  StreamMarks& m = marks(&c);  // the engine's marks on it
  m.reservedAt = 5;
  EXPECT_FALSE(claimOut(*allreduce, &c));
  EXPECT_TRUE(claimOut(*chunk, &c));
  EXPECT_EQ(m.writer, &*chunk);
  EXPECT_EQ(m.reservedAt, UINT64_MAX);  // it went: the reservation is spent
  EXPECT_FALSE(claimOut(*allreduce, &c));  // the chunk holds the stream
  letGo(*chunk);

  // The allreduce waits for the stream now: a message posted after it lets
  // it go first, and once it has it nobody else writes.
  EXPECT_FALSE(claimOut(*later, &c));
  EXPECT_TRUE(claimOut(*allreduce, &c));
  EXPECT_FALSE(claimOut(*later, &c));
  letGo(*allreduce);
  EXPECT_TRUE(claimOut(*later, &c));
  letGo(*later);

  // Without a reservation an ordered operation takes a free stream, and a
  // reservation made after it was issued does not hold it back.
  m.reservedAt = 8;
  EXPECT_TRUE(claimOut(*allreduce, &c));
  letGo(*allreduce);
}

// The drive token goes to the waiter that asked for it: the thread that let
// go, driving for a less urgent level, cannot take it back first.
TEST(DriveToken, AHandOverGoesToTheAskerNotBackToALessUrgentDriver) {
  tern::DriveToken t;
  ASSERT_TRUE(t.tryTakeAt(7));  // a bulk caller drives
  EXPECT_TRUE(t.ask(0));        // an urgent one asks
  EXPECT_TRUE(t.wanted(7));
  EXPECT_FALSE(t.wanted(0));
  t.letGo();
  EXPECT_FALSE(t.tryTakeAt(7));              // not back to the bulk caller
  EXPECT_FALSE(t.tryTakeAt(tern::kLevels));  // nor to the progress thread
  ASSERT_TRUE(t.tryTakeAt(0));
  t.served(0);
  EXPECT_FALSE(t.anyWants());
  t.letGo();
  EXPECT_TRUE(t.tryTakeAt(7));
  t.letGo();
}

TEST(DriveToken, ServingOneAskLeavesAMoreUrgentOnePending) {
  tern::DriveToken t;
  EXPECT_TRUE(t.ask(3));
  EXPECT_TRUE(t.ask(1));
  EXPECT_FALSE(t.ask(2));  // not more urgent than what was asked
  t.served(3);             // the level-3 waiter took it: the level-1 ask stays
  EXPECT_TRUE(t.wanted(2));
  t.served(1);
  EXPECT_FALSE(t.wanted(tern::kLevels));
}

// A waiter that asked and left without taking the token (another thread
// drove its operation to the end) holds nobody back for longer than kAskLasts.
TEST(DriveToken, AnAskNotRenewedLapses) {
  tern::DriveToken t;
  t.ask(0);
  EXPECT_FALSE(t.tryTakeAt(tern::kLevels));
  std::this_thread::sleep_for(std::chrono::nanoseconds(tern::DriveToken::kAskLasts) +
                              std::chrono::milliseconds(5));
  EXPECT_TRUE(t.tryTakeAt(tern::kLevels));
  t.letGo();
}

TEST(SipHash, ReferenceVector) {
  // From the SipHash paper (Appendix A): key 00..0f, message 00..0e.
  Secret k;
  for (int i = 0; i < 16; ++i) k.key[i] = static_cast<uint8_t>(i);
  uint8_t msg[15];
  for (int i = 0; i < 15; ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(sipHash24(k, msg, sizeof msg), 0xa129ca6149be45e5ull);
}

TEST(Fifo, WrapsAroundAndKeepsOrder) {
  const size_t cap = 4096;
  std::vector<char> mem(fifoFootprint(cap));
  Fifo f;
  f.attach(mem.data(), cap, 4096, true);
  uint32_t next = 0, expect = 0;
  for (int round = 0; round < 1000; ++round) {
    size_t want = 1 + (round * 37) % 1500;  // odd sizes force partial, wrapping writes
    size_t written = 0;
    while (written < want) {
      char* p;
      size_t n = std::min(f.writable(&p), want - written);
      if (n == 0) break;
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(next++);
      f.produce(n);
      written += n;
    }
    const char* q;
    size_t n;
    while ((n = f.readable(&q)) > 0) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(q[i], static_cast<char>(expect++));
      f.consume(n);
    }
  }
  EXPECT_EQ(next, expect);
  EXPECT_TRUE(f.empty());
}

TEST(Fifo, NeverOverfills) {
  const size_t cap = 4096;
  std::vector<char> mem(fifoFootprint(cap));
  Fifo f;
  f.attach(mem.data(), cap, 4096, true);
  char* p;
  size_t total = 0, n;
  while ((n = f.writable(&p)) > 0) {
    f.produce(n);
    total += n;
  }
  EXPECT_EQ(total, cap);
}

// Data pages of a fifo the kernel holds in memory (mincore), header excluded.
size_t residentPages(void* mem, size_t cap) {
  std::vector<unsigned char> v(cap / 4096);
  if (mincore(static_cast<char*>(mem) + fifoFootprint(cap) - cap, cap, v.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

// Writes `n` bytes of the stream counter into the fifo (whatever fits now).
size_t putBytes(Fifo& f, uint32_t* next, size_t n) {
  size_t done = 0;
  char* p;
  size_t k;
  while (done < n && (k = std::min(f.writable(&p), n - done)) > 0) {
    for (size_t i = 0; i < k; ++i) p[i] = static_cast<char>((*next)++);
    f.produce(k);
    done += k;
  }
  return done;
}

// Reads everything there is, checking it continues the stream.
::testing::AssertionResult takeBytes(Fifo& f, uint32_t* expect, size_t max = SIZE_MAX) {
  const char* q;
  size_t n;
  while (max > 0 && (n = std::min(f.readable(&q), max)) > 0) {
    for (size_t i = 0; i < n; ++i)
      if (q[i] != static_cast<char>((*expect)++))
        return ::testing::AssertionFailure() << "wrong byte at stream position " << f.consumed() + i;
    f.consume(n);
    max -= n;
  }
  return ::testing::AssertionSuccess();
}

// Memory follows use: small messages keep to the ring's first pages however
// many go through; one large message faults the whole ring in, and the ring
// keeps it (no first touch on the data path after that).
TEST(Fifo, ResidentMemoryFollowsUse) {
  const size_t granule = 12288, cap = 341 * granule;  // 4 MiB, a multiple of the ternary quantum at 3-7 ranks
  void* mem = allocPages(fifoFootprint(cap));
  ASSERT_NE(mem, nullptr);
  Fifo f;
  f.attach(mem, cap, granule, true);
  uint32_t next = 0, expect = 0;
  for (int i = 0; i < 20000; ++i) {  // 40 MiB in all: ten times round the ring without restarts
    size_t n = 64 + (i * 997) % 4033;
    ASSERT_EQ(putBytes(f, &next, n), n);
    ASSERT_TRUE(takeBytes(f, &expect));
  }
  EXPECT_GT(f.restarts(), 1000u);  // one each 12 KiB or so
  EXPECT_LE(f.span(), granule + 4096);
  EXPECT_LE(residentPages(mem, cap), (granule + 4096) / 4096);
  EXPECT_EQ(putBytes(f, &next, cap), cap);  // one message the size of the ring
  ASSERT_TRUE(takeBytes(f, &expect));
  EXPECT_EQ(f.span(), cap);
  EXPECT_EQ(residentPages(mem, cap), cap / 4096);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(putBytes(f, &next, 100), 100u);
    ASSERT_TRUE(takeBytes(f, &expect));
  }
  EXPECT_EQ(residentPages(mem, cap), cap / 4096);
  freePages(mem, fifoFootprint(cap));
}

// A writer that runs ahead of its reader (a rooted collective's sender, its
// checks owed) never finds the ring empty at the window's end.  Writing on
// walked the whole ring, faulting in a page every few messages on both
// sides; the small path waits instead when Fifo::outrunsWindow says so, the
// reader catches up, and the ring restarts in the pages it has.  A reader
// only a message behind (an exchange's) is not waited for.
TEST(Fifo, AWriterAheadOfItsReaderWaitsRatherThanTouchNewPages) {
  const size_t cap = 1 << 20, n = 512;  // divides the ring: no message meets the wrap point
  for (bool honour : {true, false}) {
    std::vector<char> mem(fifoFootprint(cap));
    Fifo f;
    f.attach(mem.data(), cap, 4096, true);
    uint32_t next = 0, expect = 0;
    size_t waits = 0;
    for (int i = 0; i < 4000; ++i) {  // 2 MiB: twice round the ring
      char* p;
      ASSERT_GE(f.writable(&p), n);
      if (honour && f.outrunsWindow(n)) {
        ++waits;
        ASSERT_TRUE(takeBytes(f, &expect));  // the reader catches up meanwhile
        ASSERT_GE(f.writable(&p), n);
        ASSERT_FALSE(f.outrunsWindow(n));
      }
      ASSERT_EQ(putBytes(f, &next, n), n);
      if (f.produced() - f.consumed() > 6 * n) ASSERT_TRUE(takeBytes(f, &expect, 3 * n));  // 4-7 behind
    }
    ASSERT_TRUE(takeBytes(f, &expect));
    if (honour) {
      EXPECT_GT(waits, 100u);
      EXPECT_LE(f.span(), 4096 + 4 * n);
    } else {
      EXPECT_EQ(f.span(), cap);  // the walk the wait prevents
    }
  }
  std::vector<char> mem(fifoFootprint(cap));
  Fifo f;
  f.attach(mem.data(), cap, 4096, true);
  uint32_t next = 0, expect = 0;
  for (int i = 0; i < 4000; ++i) {  // a reader one message behind
    char* p;
    ASSERT_GE(f.writable(&p), n);
    ASSERT_FALSE(f.outrunsWindow(n)) << "message " << i;
    ASSERT_EQ(putBytes(f, &next, n), n);
    if (i > 0) ASSERT_TRUE(takeBytes(f, &expect, n));
  }
}

// TERN_FIFO_WINDOW: small messages cycle through that many bytes, no more.
TEST(Fifo, WindowBoundsTheSpanOfSmallMessages) {
  const size_t granule = 4096, cap = 1 << 20, window = 64 << 10;
  std::vector<char> mem(fifoFootprint(cap));
  Fifo f;
  f.attach(mem.data(), cap, granule, true);
  f.setWindow(window);
  uint32_t next = 0, expect = 0;
  for (int i = 0; i < 5000; ++i) {  // 5 MiB in all
    ASSERT_EQ(putBytes(f, &next, 1000), 1000u);
    ASSERT_TRUE(takeBytes(f, &expect));
  }
  EXPECT_GT(f.span(), window - 1000);
  EXPECT_LE(f.span(), window + 1000);
  EXPECT_GT(f.restarts(), 50u);
}

// A fifo in page-aligned private memory, with a producer end and a consumer end.
struct FifoPair {
  FifoPair(size_t cap, size_t granule) : mem(fifoFootprint(cap) + 4096) {
    at = mem.data() + (4096 - reinterpret_cast<uintptr_t>(mem.data()) % 4096) % 4096;
    prod.attach(at, cap, granule, true);
    cons.attach(at, cap, granule, false);
    data = at + fifoFootprint(cap) - cap;
  }
  std::vector<char> mem;
  char *at, *data;
  Fifo prod, cons;
};

// The consumer computes where bytes are from the base it expects (the last
// one, or the restart point once the producer's window is used up and it had
// read all it saw) and checks the header's: a restart it did not see coming
// still moves its view to the first page, a producer that wrote on instead
// of restarting keeps it where it was, and a read with the same base keeps
// its place.
TEST(Fifo, ConsumerFollowsRestartsItDidNotSee) {
  const size_t granule = 4096, cap = 4 * granule;
  for (bool windowKnown : {false, true}) {
    FifoPair f(cap, granule);
    if (windowKnown) f.prod.setWindow(granule);  // published in the header
    uint32_t next = 0, expect = 0;
    const char* q;
    ASSERT_EQ(putBytes(f.prod, &next, 5000), 5000u);  // past the window: an empty start restarts
    ASSERT_TRUE(takeBytes(f.cons, &expect));
    ASSERT_EQ(putBytes(f.prod, &next, 100), 100u);
    EXPECT_EQ(f.prod.restarts(), 1u);
    ASSERT_EQ(f.cons.readable(&q), 100u);
    EXPECT_EQ(q, f.data + 5000 % granule);  // where the producer put it, not at 5000
    ASSERT_EQ(putBytes(f.prod, &next, 50), 50u);  // no restart: the ring is not empty
    ASSERT_EQ(f.cons.readable(&q), 150u);
    EXPECT_EQ(q, f.data + 5000 % granule);
    ASSERT_TRUE(takeBytes(f.cons, &expect));
    // Past the window again, but the producer writes on before the consumer
    // has read the last bytes: no restart, though the consumer read all it saw.
    ASSERT_EQ(putBytes(f.prod, &next, 4000), 4000u);
    ASSERT_EQ(f.cons.readable(&q), 4000u);
    ASSERT_EQ(putBytes(f.prod, &next, 60), 60u);
    f.cons.consume(4000);
    expect += 4000;
    EXPECT_EQ(f.prod.restarts(), 1u);
    ASSERT_EQ(f.cons.readable(&q), 60u);
    EXPECT_EQ(q, f.data + (5000 % granule + 150 + 4000));
    ASSERT_TRUE(takeBytes(f.cons, &expect));
    // Read all, window used up, and this time the producer finds it empty.
    ASSERT_EQ(putBytes(f.prod, &next, 10), 10u);
    EXPECT_EQ(f.prod.restarts(), 2u);
    ASSERT_EQ(f.cons.readable(&q), 10u);
    EXPECT_EQ(q, f.data + 9210 % granule);
    ASSERT_TRUE(takeBytes(f.cons, &expect));
    EXPECT_EQ(expect, next);
  }
}

// The small path's reader looks where the next bytes will land (ahead) and,
// finding a message whole there, takes it before the producer has published
// its head (found, consume): the view must be the producer's write pointer
// (restarts included), and the head that comes later must not show those
// bytes again (nor a negative count as a huge one).
TEST(Fifo, BytesFoundAheadOfTheHeadAreTakenOnce) {
  const size_t granule = 4096, cap = 4 * granule;
  FifoPair f(cap, granule);
  f.prod.setWindow(granule);
  uint32_t next = 0, expect = 0;
  ASSERT_EQ(putBytes(f.prod, &next, 5000), 5000u);  // the consumer learns the window from a restart
  ASSERT_TRUE(takeBytes(f.cons, &expect));
  ASSERT_EQ(putBytes(f.prod, &next, 64), 64u);
  ASSERT_TRUE(takeBytes(f.cons, &expect));
  for (int m = 0; m < 400; ++m) {  // ~6 windows of 64-byte messages
    const size_t n = 64;
    const char* a;
    ASSERT_GE(f.cons.ahead(&a), n);
    char* w;
    ASSERT_GE(f.prod.writable(&w), n);
    ASSERT_EQ(a, w) << "message " << m;
    for (size_t i = 0; i < n; ++i) w[i] = static_cast<char>(next++);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], static_cast<char>(expect++));
    f.cons.found(n);
    f.cons.consume(n);
    const char* q;
    EXPECT_EQ(f.cons.readable(&q), 0u);  // the consumer is past the head now
    f.prod.produce(n);
    EXPECT_EQ(f.cons.readable(&q), 0u);  // and the head shows nothing it took
  }
  EXPECT_GT(f.prod.restarts(), 3u);  // the views crossed restarts
  ASSERT_EQ(putBytes(f.prod, &next, 100), 100u);  // the plain path goes on from there
  ASSERT_TRUE(takeBytes(f.cons, &expect));
  EXPECT_EQ(expect, next);
}

// A producer and a consumer on two threads, messages swinging between a few
// bytes and more than the ring, the consumer sometimes behind and sometimes
// idle: every restart happens while messages come and go, and the stream
// stays exact (TSan checks the ordering of base against head).
TEST(Fifo, RestartsKeepTheStreamWhileMessagesAreInFlight) {
  const size_t granule = 12288, cap = 6 * granule;
  FifoPair f(cap, granule);
  Fifo &prod = f.prod, &cons = f.cons;
  const uint64_t total = 32 << 20;
  std::atomic<bool> wrong{false};
  std::thread reader([&] {
    uint32_t expect = 0;
    std::mt19937 rng(2);
    while (cons.consumed() < total && !wrong) {
      ::testing::AssertionResult ok = takeBytes(cons, &expect, 1 + rng() % (3 * cap / 2));
      if (!ok) {
        ADD_FAILURE() << ok.message();
        wrong = true;  // the producer stops instead of waiting for room
      }
      if (rng() % 8 == 0) std::this_thread::yield();
    }
  });
  uint32_t next = 0;
  std::mt19937 rng(1);
  uint64_t sent = 0;
  for (int msg = 0; sent < total && !wrong; ++msg) {
    size_t n = std::min<uint64_t>(rng() % 4 ? 1 + rng() % 200 : rng() % (2 * cap), total - sent);
    for (size_t done = 0; done < n && !wrong;) done += putBytes(prod, &next, n - done);
    sent += n;
    // Every 4th message the producer waits for the consumer to catch up, so
    // restarts happen however the threads are scheduled; otherwise it runs on.
    while (msg % 4 == 3 && !prod.empty() && !wrong) std::this_thread::yield();
  }
  reader.join();
  EXPECT_GT(prod.restarts(), 50u);  // the case under test did happen
}

TEST(Half, RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(floatToHalf(f), h) << h;
    EXPECT_EQ(floatToBf16(bf16ToFloat(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(halfToFloat(floatToHalf(2049.0f)), 2048.0f);  // tie -> even
  EXPECT_EQ(halfToFloat(floatToHalf(2051.0f)), 2052.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(1e6f)), INFINITY);
  EXPECT_EQ(bf16ToFloat(floatToBf16(257.0f)), 256.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(259.0f)), 260.0f);
}

TEST(ReduceKernels, OpsAndAverages) {
  int32_t a[3] = {1, -7, 5}, b[3] = {4, 2, -5}, d[3];
  reduceKernel(d, a, b, 3, ternInt32, ternMax, 0);
  EXPECT_EQ(d[1], 2);
  reduceKernel(d, a, b, 3, ternInt32, ternAvg, 2);
  EXPECT_EQ(d[0], 2);   // 5/2 truncates
  EXPECT_EQ(d[1], -2);  // -5/2 truncates toward zero
  uint16_t h[2] = {floatToHalf(1.5f), floatToHalf(-2.0f)}, g[2] = {floatToHalf(2.0f), floatToHalf(3.0f)};
  reduceKernel(h, h, g, 2, ternFloat16, ternProd, 0);
  EXPECT_EQ(halfToFloat(h[0]), 3.0f);
  EXPECT_EQ(halfToFloat(h[1]), -6.0f);
}

// Every instruction set's loops give the baseline's bits, for every type
// and op, at lengths and alignments that leave vector heads and tails, with
// NaNs, infinities, signed zeros and subnormals among the floats.  A
// variant that reduced pairs out of order, or rounded a 16-bit float
// otherwise, fails here.
TEST(ReduceKernels, EveryInstructionSetGivesTheBaselinesBits) {
  const HostReduceLoops* base = hostReduceLoops("baseline");
  ASSERT_NE(base, nullptr);
  std::vector<const HostReduceLoops*> wide;
  for (const char* isa : {"avx2", "avx512"})
    if (const HostReduceLoops* l = hostReduceLoops(isa)) wide.push_back(l);
  if (wide.empty()) GTEST_SKIP() << "this CPU runs no wider loops than the baseline";
  EXPECT_EQ(hostReduceLoops("sse9"), nullptr);
  std::mt19937_64 rng(7);
  const size_t kMax = 300 * 8 + 64;
  std::vector<unsigned char> a(kMax), b(kMax), want(kMax), got(kMax);
  const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, -1e-42f, 65504.0f, 3.0e38f};
  const ternDataType_t types[] = {ternInt8,   ternUint8,   ternInt32,    ternUint32,  ternInt64,
                                  ternUint64, ternFloat16, ternBfloat16, ternFloat32, ternFloat64};
  const ternRedOp_t ops[] = {ternSum, ternProd, ternMax, ternMin, ternAvg};
  for (ternDataType_t dt : types)
    for (size_t count : {0, 1, 7, 8, 15, 16, 17, 31, 33, 63, 65, 255, 300})
      for (size_t shift : {0, 1, 4}) {
        const size_t sz = typeSize(dt), off = shift * sz;
        for (auto& x : a) x = static_cast<unsigned char>(rng());
        for (auto& x : b) x = static_cast<unsigned char>(rng());
        if (dt == ternFloat32)
          for (size_t i = 0; i < count; i += 5) memcpy(&a[off + i * 4], &specials[i % 8], 4);
        for (const HostReduceLoops* l : wide) {
          for (ternRedOp_t op : ops) {
            const int div = op == ternAvg ? 3 : 0;
            base->reduce(&want[off], &a[off], &b[off], count, dt, op, div);
            l->reduce(&got[off], &a[off], &b[off], count, dt, op, div);
            ASSERT_EQ(memcmp(&want[off], &got[off], count * sz), 0)
                << l->name << " type " << dt << " op " << op << " count " << count << " shift " << shift;
          }
          memcpy(&want[off], &a[off], count * sz);
          memcpy(&got[off], &a[off], count * sz);
          base->divide(&want[off], count, dt, 3);
          l->divide(&got[off], count, dt, 3);
          ASSERT_EQ(memcmp(&want[off], &got[off], count * sz), 0) << l->name << " divide, type " << dt;
          base->scale(&want[off], &a[off], count, dt, &b[0]);
          l->scale(&got[off], &a[off], count, dt, &b[0]);
          ASSERT_EQ(memcmp(&want[off], &got[off], count * sz), 0) << l->name << " scale, type " << dt;
        }
      }
  // The one in use is one of them.
  const std::string inUse = hostReduce().name;
  EXPECT_TRUE(inUse == "baseline" || inUse == "avx2" || inUse == "avx512") << inUse;
}

TEST(Socket, ParsesAddresses) {
  SockAddr a;
  ASSERT_EQ(parseHostPort("127.0.0.1:4567", &a), ternSuccess);
  EXPECT_EQ(a.port(), 4567);
  EXPECT_EQ(a.str(), "127.0.0.1:4567");
  ASSERT_EQ(parseHostPort("[::1]:80", &a), ternSuccess);
  EXPECT_EQ(a.str(), "[::1]:80");
  EXPECT_EQ(parseHostPort("no-port-here", &a), ternInvalidArgument);
  std::string name;
  ASSERT_EQ(pickInterface("=lo", &a, &name), ternSuccess);
  EXPECT_EQ(name, "lo");
  EXPECT_EQ(pickInterface("=does-not-exist0", &a, &name), ternSystemError);
  ASSERT_EQ(pickInterface("^lo", &a, &name), ternSuccess);
  EXPECT_NE(name, "lo");
}

TEST(Rdma, ListsPortsOrNoneWithoutFailing) {
  std::vector<RdmaPort> ports;
  ASSERT_EQ(listRdmaPorts(&ports), ternSuccess);
  // This machine has no RDMA hardware: the list is empty and nothing is
  // suggested.  (With devices, every port has a name and a link layer.)
  for (const RdmaPort& p : ports) {
    EXPECT_FALSE(p.device.empty());
    EXPECT_TRUE(p.linkLayer == "InfiniBand" || p.linkLayer == "Ethernet");
  }
  if (ports.empty()) EXPECT_EQ(suggestUcxNetDevices(ports), "");
}

TEST(Rdma, SuggestsActivePortsForUcx) {
  std::vector<RdmaPort> ports(3);
  ports[0] = {"mlx5_0", 1, "InfiniBand", "ACTIVE", 200, ""};
  ports[1] = {"mlx5_1", 1, "Ethernet", "DOWN", 0, ""};
  ports[2] = {"mlx5_2", 2, "Ethernet", "ACTIVE", 100, ""};
  EXPECT_EQ(suggestUcxNetDevices(ports), "mlx5_0:1,mlx5_2:2");
}

TEST(Rdma, ActivePortDecides) {
  std::vector<RdmaPort> ports(1);
  ports[0] = {"mlx5_1", 1, "Ethernet", "DOWN", 0, ""};
  EXPECT_FALSE(hasActiveRdmaPort(ports));
  ports[0].state = "ACTIVE";
  EXPECT_TRUE(hasActiveRdmaPort(ports));
  EXPECT_FALSE(hasActiveRdmaPort({}));
}

// Across hosts auto takes UCX only where it carries RDMA: over plain TCP
// tern's own tcp was faster (issue 24).  TERN_NET names win either way.
TEST(Registry, AutoTakesUcxAcrossHostsOnlyWithRdma) {
  EXPECT_TRUE(autoUsesUcx("auto", true, true));
  EXPECT_FALSE(autoUsesUcx("auto", true, false));
  EXPECT_FALSE(autoUsesUcx("auto", false, true));
  EXPECT_TRUE(autoUsesUcx("ucx", true, false));
  EXPECT_FALSE(autoUsesUcx("tcp", true, true));
}

// A descriptor starts on its stream's record alignment and never where it
// and a header after it (64 bytes) would cross a 4 KiB boundary, on which
// every fifo's wrap point lies; away from page ends it is plain alignment.
TEST(RecordSkip, AlignsAndKeepsADescriptorAndItsHeaderWithinAPage) {
  for (size_t align : {size_t(8), size_t(32)})
    for (uint64_t pos = 0; pos < 3 * 4096; ++pos) {
      const size_t skip = recordSkip(pos, align);
      const uint64_t at = pos + skip;
      ASSERT_EQ(at % align, 0u) << pos;
      ASSERT_LE(at % 4096 + 64, 4096u) << pos << " align " << align;
      ASSERT_LT(skip, align + 64) << pos;
      if ((pos + alignUp(pos, align)) % 4096 <= 4096 - 64) ASSERT_EQ(skip, alignUp(pos, align)) << pos;
    }
  EXPECT_EQ(recordSkip(40, 8), 0u);     // an 8-byte message's successor follows at once
  EXPECT_EQ(recordSkip(4040, 8), 56u);  // 4040 + 64 would cross the page: to 4096
}

// A descriptor by reference (op_desc.h, kRepeatTag): which descriptors
// repeat the stream's last, and a reader rebuilding each from the last it
// heard, whole or repeated, across the 47-bit wrap of the word's seq.
OpDesc descWithSeq(uint64_t seq) {
  OpDesc d;
  d.magic = kDescMagic;
  d.kind = 3, d.dtype = 7, d.level = 2, d.root = 1, d.rank = 0, d.count = 5, d.seq = seq;
  return d;
}

TEST(RepeatedDescriptor, OnlyALaterSeqOfTheSameCallRepeats) {
  const OpDesc last = descWithSeq(10);
  EXPECT_TRUE(repeats(last, descWithSeq(11)));
  EXPECT_TRUE(repeats(last, descWithSeq(10 + kRepeatSeqMask)));
  EXPECT_FALSE(repeats(last, descWithSeq(11 + kRepeatSeqMask)));  // its low bits would name an earlier seq
  EXPECT_FALSE(repeats(last, descWithSeq(10)));
  EXPECT_FALSE(repeats(last, descWithSeq(9)));
  OpDesc other = descWithSeq(11);
  other.count = 6;
  EXPECT_FALSE(repeats(last, other));
  other = descWithSeq(11), other.root = 0;
  EXPECT_FALSE(repeats(last, other));
  EXPECT_FALSE(repeats(OpDesc{}, descWithSeq(11)));  // nothing on the stream yet
  EXPECT_EQ(descBytesAfter(last, descWithSeq(12)), kRepeatBytes);
  EXPECT_EQ(descBytesAfter(last, other), sizeof(OpDesc));
}

TEST(RepeatedDescriptor, AReaderRebuildsWhatTheWriterMeant) {
  for (uint64_t base : {uint64_t{0}, kRepeatSeqMask - 3, uint64_t{7} << 50}) {
    const OpDesc heard = descWithSeq(base);
    for (uint64_t step : {uint64_t{1}, uint64_t{2}, uint64_t{1000}, kRepeatSeqMask}) {
      const OpDesc sent = descWithSeq(base + step);
      ASSERT_TRUE(repeats(heard, sent));
      for (bool whole : {false, true}) {  // the small path's word and the engine's
        char wire[sizeof(OpDesc)];
        uint64_t w = repeatWord(sent) | (whole ? kSeqWhole : 0);
        memcpy(wire, &w, sizeof w);
        OpDesc got;
        ASSERT_EQ(descRecordAt(wire, kRepeatBytes - 1, heard, &got), 0u);  // not all come
        ASSERT_EQ(descRecordAt(wire, kRepeatBytes, heard, &got), kRepeatBytes);
        EXPECT_EQ(memcmp(&got, &sent, sizeof got), 0) << base << " + " << step;
      }
    }
  }
  const OpDesc other = descWithSeq(3);
  char wire[sizeof(OpDesc)];
  memcpy(wire, &other, sizeof other);
  OpDesc got;
  EXPECT_EQ(descRecordAt(wire, sizeof(OpDesc) - 1, descWithSeq(1), &got), 0u);
  ASSERT_EQ(descRecordAt(wire, sizeof(OpDesc), descWithSeq(1), &got), sizeof(OpDesc));
  EXPECT_EQ(memcmp(&got, &other, sizeof got), 0);
  // The small path's words: where a record's last word lies, what it reads.
  EXPECT_EQ(wholeWord(other, sizeof(OpDesc)), 3 | kSeqWhole);
  EXPECT_EQ(wholeWord(other, kRepeatBytes), repeatWord(other) | kSeqWhole);
  markWhole(wire, kRepeatBytes, wholeWord(other, kRepeatBytes));
  EXPECT_EQ(wholeWordIn(wire, kRepeatBytes), repeatWord(other) | kSeqWhole);
}

}  // namespace
}  // namespace tern
