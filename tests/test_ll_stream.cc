// The LL stream of shm connections (src/transport/ll.h) on its own, in one
// process: two rings in ordinary memory stand in for the two shared
// segments (the code is the same; only the mapping differs).  Byte order and
// content across ring wraps, partly filled lines extended by later commits,
// the reader's private buffer compacting, and a writer and a reader on two
// threads (the release/acquire pairing; also run under ThreadSanitizer).
// And the engine's check of the pair's other stream (a peer that sent an
// operation's descriptor over the other side of the limit) on such rings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "base/error.h"
#include "collectives/collectives.h"
#include "engine/operation.h"
#include "engine/phase_blockers.h"
#include "transport/ll.h"

using namespace tern;

namespace {

unsigned char byteAt(uint64_t pos) { return static_cast<unsigned char>(pos * 131 % 251); }

struct Pair {
  std::unique_ptr<LlRing> ab{new LlRing()}, ba{new LlRing()};  // zeroed: empty rings
  LlConn owner, a, b;  // a writes to b; `owner` stands in for the shm connection
  Pair() {
    a.attach(&owner, ba.get(), ab.get(), 4096);
    b.attach(&owner, ab.get(), ba.get(), 4096);
  }
};

// Writes up to n bytes of the pattern; returns how many went.
size_t writeSome(LlConn& w, size_t n) {
  char* p;
  size_t k = std::min(w.sendSpace(&p), n);
  for (size_t i = 0; i < k; ++i) p[i] = static_cast<char>(byteAt(w.sendPos() + i));
  w.sendCommit(k);
  w.flush();
  return k;
}

// Reads up to n bytes and checks them; returns how many, or SIZE_MAX on a wrong byte.
size_t readSome(LlConn& r, size_t n) {
  const char* p;
  size_t k = std::min(r.recvAvail(&p), n);
  for (size_t i = 0; i < k; ++i)
    if (static_cast<unsigned char>(p[i]) != byteAt(r.recvPos() + i)) return SIZE_MAX;
  r.recvConsume(k);
  return k;
}

// The views keep the stream's alignment in memory whatever byte the last
// flush ended at: a reduction writes elements straight into sendSpace's view
// (misaligned, UBSan caught it after a 1-byte message).
TEST(LlStream, ViewsKeepTheStreamAlignment) {
  Pair x;
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    writeSome(x.a, rng() % 150 + 1);  // flushed at an odd place now and then
    char* p;
    ASSERT_GT(x.a.sendSpace(&p), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, x.a.sendPos() % 64) << "after " << x.a.sendPos() << " bytes";
    const char* q;
    while (x.b.recvPos() < x.a.sendPos()) {
      size_t k = readSome(x.b, x.a.sendPos() - x.b.recvPos());
      ASSERT_NE(k, SIZE_MAX);
    }
    x.b.recvAvail(&q);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, x.b.recvPos() % 64);
  }
}

TEST(LlStream, BytesArriveInOrderAcrossWrapsAndPartialLines) {
  Pair x;
  std::mt19937 rng(7);
  const uint64_t total = 6 * kLlLines * kLlLineData;  // six laps of the ring
  while (x.b.recvPos() < total) {
    // Odd sizes: lines are left partly filled and extended by the next commit.
    for (int i = 0; i < 8 && x.a.sendPos() < total; ++i)
      writeSome(x.a, std::min<uint64_t>(rng() % 700 + 1, total - x.a.sendPos()));
    size_t got = readSome(x.b, rng() % 3000 + 1);
    ASSERT_NE(got, SIZE_MAX) << "wrong byte near stream position " << x.b.recvPos();
  }
  EXPECT_EQ(x.a.sendPos(), total);
  EXPECT_EQ(x.owner.bytesSent.load(), total);
  EXPECT_EQ(x.owner.bytesRecv.load(), total);
  const char* p;
  EXPECT_EQ(x.b.recvAvail(&p), 0u);  // nothing more than was sent
}

// A descriptor and its payload, committed one after the other, reach the
// reader together: nothing is visible before the flush.
TEST(LlStream, CommitsBecomeVisibleAtTheFlush) {
  Pair x;
  char* p;
  const char* q;
  ASSERT_GE(x.a.sendSpace(&p), 32u);
  memset(p, 7, 32);
  x.a.sendCommit(32);
  ASSERT_GE(x.a.sendSpace(&p), 8u);
  memset(p, 9, 8);
  x.a.sendCommit(8);
  EXPECT_EQ(x.a.sendPos(), 40u);
  EXPECT_EQ(x.b.recvAvail(&q), 0u);
  x.a.flush();
  ASSERT_EQ(x.b.recvAvail(&q), 40u);
  EXPECT_EQ(q[0], 7);
  EXPECT_EQ(q[39], 9);
}

TEST(LlStream, WriterStopsWhenTheRingIsFullAndGoesOnOnceRead) {
  Pair x;
  uint64_t wrote = 0;
  while (size_t k = writeSome(x.a, 1 << 20)) wrote += k;
  // A full ring, nothing overwritten (each flush leaves at most one line short).
  EXPECT_LE(wrote, kLlLines * kLlLineData);
  EXPECT_GT(wrote, (kLlLines - 8) * kLlLineData);
  char* p;
  EXPECT_EQ(x.a.sendSpace(&p), 0u);
  // Reading gathers lines and returns them: the writer has room again.
  ASSERT_EQ(readSome(x.b, kLlStage), kLlStage);
  EXPECT_GT(x.a.sendSpace(&p), 0u);
}

TEST(LlStream, AWriterAndAReaderOnTwoThreads) {
  Pair x;
  const uint64_t total = 8 << 20;
  std::thread writer([&] {
    std::mt19937 rng(1);
    while (x.a.sendPos() < total) writeSome(x.a, std::min<uint64_t>(rng() % 5000 + 1, total - x.a.sendPos()));
  });
  std::mt19937 rng(2);
  bool right = true;
  while (right && x.b.recvPos() < total) right = readSome(x.b, rng() % 5000 + 1) != SIZE_MAX;
  writer.join();
  EXPECT_TRUE(right) << "wrong byte near stream position " << x.b.recvPos();
  EXPECT_EQ(x.b.recvPos(), total);
}

// The pair a receiver waits on: `in` (a small sibling, as LlConn is) and
// the connection it belongs to, `other`, each fed by the peer's writer.
struct SiblingPair {
  Pair small, big;
  SiblingPair() {
    small.b.attach(&big.b, small.ab.get(), small.ba.get(), 4096);  // big.b owns small.b
  }
};

// A descriptor of rank 3's send of `count` int32 to rank 0, #seq.
OpDesc sendDesc(uint64_t count, uint64_t seq) {
  OpDesc d;
  d.magic = kDescMagic;
  d.kind = static_cast<uint8_t>(OpKind::Send);
  d.dtype = static_cast<uint8_t>(ternInt32);
  d.redop = static_cast<uint8_t>(ternSum);
  d.level = 4;
  d.root = 0;
  d.rank = 3;
  d.count = count;
  d.seq = seq;
  return d;
}

void writeDesc(LlConn& w, const OpDesc& d) {
  char* p;
  ASSERT_GE(w.sendSpace(&p), sizeof d);
  memcpy(p, &d, sizeof d);
  w.sendCommit(sizeof d);
  w.flush();
}

// Rank 0's receive of `count` int32 from rank 3, #seq, waiting for its
// descriptor on `in`.
struct WaitingRecv {
  OpPool* pool = new OpPool;  // freed by close() once its operation is gone
  OpPtr ptr = pool->get();
  Operation& op = *ptr;
  WaitingRecv(Conn* in, uint64_t count, uint64_t seq) {
    pool->close();
    op.desc = sendDesc(count, seq);
    op.desc.kind = static_cast<uint8_t>(OpKind::Recv);
    op.desc.root = 3;
    op.desc.rank = 0;
    op.phase.progs.resize(1);
    Program& p = op.phase.progs[0];
    Step s{};
    s.in = in;
    s.bytes = count * 4;
    p.steps.push_back(s);
    p.started = true;
    p.in.desc = sizeof(OpDesc);
  }
};

// The peer's next operation on the other stream while ours has not come: a
// mismatch, named with both calls.
TEST(SiblingStreams, APeersNextDescriptorOnTheOtherStreamIsAMismatch) {
  SiblingPair x;
  writeDesc(x.big.a, sendDesc(7, 3));
  WaitingRecv r(&x.small.b, 6, 2);
  ASSERT_EQ(checkOtherStream(r.op, r.op.phase), ternInvalidUsage);
  // Only the parts of the sentence that do not name the kinds: their names
  // come from the collectives' registry, which this binary need not link in
  // (then both read "unknown operation").
  const std::string& why = lastThreadError();
  EXPECT_NE(why.find("rank 3 called "), std::string::npos) << why;
  EXPECT_NE(why.find(" of 7 int32"), std::string::npos) << why;
  EXPECT_NE(why.find("(#3) but rank 0 called "), std::string::npos) << why;
  EXPECT_NE(why.find(" of 6 int32"), std::string::npos) << why;
}

// The peer sent ours and then its next one, between the engine's last look
// at ours and its check of the other: ours is there now, no mismatch (this
// once failed a 4-rank send/recv ring under load).
TEST(SiblingStreams, OursArrivingBeforeThePeersNextOneIsNoMismatch) {
  SiblingPair x;
  writeDesc(x.small.a, sendDesc(6, 2));
  writeDesc(x.big.a, sendDesc(7, 3));
  WaitingRecv r(&x.small.b, 6, 2);
  EXPECT_EQ(checkOtherStream(r.op, r.op.phase), ternSuccess) << lastThreadError();
}

}  // namespace
