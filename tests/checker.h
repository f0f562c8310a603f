// Checks every collective's result against values every datatype holds
// exactly (perf/harness/values.h); shared by the collective suites
// (test_collectives, test_small_messages).
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "harness.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif
#include "values.h"

namespace terntest {

using namespace ternperf;

// The datatypes and reduction ops a suite's matrix sweeps: every one, or
// one type of each element width and two ops (sum, and average with its
// division).  Narrow under ThreadSanitizer, and where a case sets
// TERNTEST_NARROW_SWEEP (the collectives over UCX): a race is in how threads
// share buffers, queues and streams, and a transport's work in the bytes it
// carries, which a call's size in bytes and its path decide; a type's or an
// op's arithmetic runs in one thread, the same over every transport, and
// the plain and AddressSanitizer stages sweep every one over shm and tcp.
// (With the full sweep and the full large size, ThreadSanitizer's three
// collective cases took ~200 of its ~1,500 test seconds; with both narrowed,
// ~35, 2026-12-05.)
inline bool narrowSweep() { return kUnderTsan || getenv("TERNTEST_NARROW_SWEEP") != nullptr; }
inline std::vector<ternDataType_t> sweptTypes() {
  if (narrowSweep()) return {ternInt8, ternFloat16, ternFloat32, ternFloat64};
  std::vector<ternDataType_t> v;
  for (int t = 0; t < ternNumTypes; ++t) v.push_back(static_cast<ternDataType_t>(t));
  return v;
}
inline std::vector<ternRedOp_t> sweptOps() {
  if (narrowSweep()) return {ternSum, ternAvg};
  std::vector<ternRedOp_t> v;
  for (int o = 0; o < ternNumOps; ++o) v.push_back(static_cast<ternRedOp_t>(o));
  return v;
}

struct Checker {
  RankCtx& ctx;
  ternComm_t comm;
  int failures = 0;

  // A call's buffers: of exactly the size asked for, every byte `fill`,
  // taken from those of earlier calls of that size when there are some.
  // Fresh multi-megabyte vectors per call cost the sanitizer stages about
  // half of this suite's time (new pages and new shadow memory for each).
  // Under AddressSanitizer a spare buffer is poisoned until it is taken
  // again, so a library write into a buffer after its call returned is
  // still reported (use-after-poison), as a fresh buffer's would be
  // (use-after-free).
  std::multimap<size_t, std::vector<char>> spare;
  struct Buffer {
    Checker* owner;
    std::vector<char> v;
    Buffer(Checker* o, std::vector<char> b) : owner(o), v(std::move(b)) {}
    Buffer(const Buffer&) = delete;
    ~Buffer() {
      ASAN_POISON_MEMORY_REGION(v.data(), v.size());
      owner->spare.emplace(v.size(), std::move(v));
    }
    char* data() { return v.data(); }
  };
  Buffer buffer(size_t bytes, char fill = 0) {
    auto it = spare.find(bytes);
    if (it == spare.end()) return Buffer(this, std::vector<char>(bytes, fill));
    std::vector<char> v = std::move(it->second);
    spare.erase(it);
    ASAN_UNPOISON_MEMORY_REGION(v.data(), bytes);
    memset(v.data(), fill, bytes);
    return Buffer(this, std::move(v));
  }
  ~Checker() {
    for (auto& b : spare) ASAN_UNPOISON_MEMORY_REGION(b.second.data(), b.second.size());
  }

  bool report(const char* coll, ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace,
              int root, size_t bad, size_t firstBad, double got, double want) {
    if (bad == 0) return true;
    failf(ctx, "%s %s/%s count=%zu %s root=%d: %zu wrong, first at %zu: got %g want %g", coll,
          typeName(dt), opName(op), count, inplace ? "in-place" : "out-of-place", root, bad,
          firstBad, got, want);
    ++failures;
    return false;
  }

  bool ok(ternResult_t r, const char* coll) {
    if (r == ternSuccess) return true;
    failf(ctx, "%s returned %s: %s", coll, ternGetErrorString(r), ternGetLastError(comm));
    ++failures;
    return false;
  }

  void allReduce(ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace) {
    size_t esz = ternTypeSize(dt);
    Buffer send = buffer(count * esz + 1), recv = buffer(count * esz + 1);
    char* s = inplace ? recv.data() : send.data();
    ValueTable in = inputTable(ctx.rank, dt, op, count), expected = reductionTable(ctx.nranks, dt, op, count);
    for (size_t i = 0; i < count; ++i) store(dt, s, i, in.at(i));
    if (!ok(ternAllReduce(s, recv.data(), count, dt, op, comm, nullptr), "ternAllReduce")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; i < count; ++i) {
      double w = expected.at(i), g = load(dt, recv.data(), i);
      if (g != w && bad++ == 0) first = i, got = g, want = w;
    }
    report("allreduce", dt, op, count, inplace, -1, bad, first, got, want);
  }

  void reduce(ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace, int root) {
    size_t esz = ternTypeSize(dt);
    Buffer send = buffer(count * esz + 1), recv = buffer(count * esz + 1, 0x5a);
    char* s = inplace ? recv.data() : send.data();
    ValueTable in = inputTable(ctx.rank, dt, op, root), expected = reductionTable(ctx.nranks, dt, op, root);
    for (size_t i = 0; i < count; ++i) store(dt, s, i, in.at(i));
    Buffer before = buffer(count * esz + 1);
    memcpy(before.data(), recv.data(), count * esz + 1);
    if (!ok(ternReduce(s, recv.data(), count, dt, op, root, comm, nullptr), "ternReduce")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; i < count; ++i) {
      // non-roots' recvbuff is untouched
      double w = ctx.rank == root ? expected.at(i) : load(dt, before.data(), i);
      double g = load(dt, recv.data(), i);
      if (!(g == w || (std::isnan(g) && std::isnan(w))) && bad++ == 0) first = i, got = g, want = w;
    }
    report("reduce", dt, op, count, inplace, root, bad, first, got, want);
  }

  void reduceScatter(ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace) {
    size_t esz = ternTypeSize(dt), n = ctx.nranks;
    Buffer send = buffer(count * n * esz + 1), recvAll = buffer(count * n * esz + 1);
    char* s = inplace ? recvAll.data() : send.data();
    char* d = inplace ? recvAll.data() + ctx.rank * count * esz : recvAll.data();
    ValueTable in = inputTable(ctx.rank, dt, op), expected = reductionTable(ctx.nranks, dt, op);
    for (size_t i = 0; i < count * n; ++i) store(dt, s, i, in.at(i));
    if (!ok(ternReduceScatter(s, d, count, dt, op, comm, nullptr), "ternReduceScatter")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; i < count; ++i) {
      double w = expected.at(ctx.rank * count + i), v = load(dt, d, i);
      if (v != w && bad++ == 0) first = i, got = v, want = w;
    }
    report("reduce_scatter", dt, op, count, inplace, -1, bad, first, got, want);
  }

  void allGather(ternDataType_t dt, size_t count, bool inplace) {
    size_t esz = ternTypeSize(dt), n = ctx.nranks;
    Buffer send = buffer(count * esz + 1), recv = buffer(count * n * esz + 1);
    char* s = inplace ? recv.data() + ctx.rank * count * esz : send.data();
    for (size_t i = 0; i < count; ++i) store(dt, s, i, inputValue(ctx.rank, i, dt, ternSum));
    std::vector<ValueTable> expected;
    for (size_t r = 0; r < n; ++r) expected.push_back(inputTable(static_cast<int>(r), dt, ternSum, 0, true));
    if (!ok(ternAllGather(s, recv.data(), count, dt, comm, nullptr), "ternAllGather")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        double w = expected[r].at(i), g = load(dt, recv.data(), r * count + i);
        if (g != w && bad++ == 0) first = r * count + i, got = g, want = w;
      }
    report("allgather", dt, ternSum, count, inplace, -1, bad, first, got, want);
  }

  void broadcast(ternDataType_t dt, size_t count, bool inplace, int root) {
    size_t esz = ternTypeSize(dt);
    Buffer send = buffer(count * esz + 1), recv = buffer(count * esz + 1);
    char* s = inplace ? recv.data() : send.data();
    if (ctx.rank == root)
      for (size_t i = 0; i < count; ++i) store(dt, s, i, inputValue(root, i, dt, ternSum));
    if (!ok(ternBroadcast(s, recv.data(), count, dt, root, comm, nullptr), "ternBroadcast")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    ValueTable expected = inputTable(root, dt, ternSum, 0, true);
    for (size_t i = 0; i < count; ++i) {
      double w = expected.at(i), g = load(dt, recv.data(), i);
      if (g != w && bad++ == 0) first = i, got = g, want = w;
    }
    report("broadcast", dt, ternSum, count, inplace, root, bad, first, got, want);
  }
};

}  // namespace terntest
