// switch_perf: does a packet's DSCP let an urgent transfer through a shared
// switch port first?  (perf/switch_bed/run puts each rank on its own
// emulated host behind a DSCP-aware switch; docs/DESIGN.md, "Priority in
// the network".)  Three ranks:
//   p2p        rank 1 sends BULK bytes to rank 0 at level 7; while that runs,
//              rank 2 sends URGENT bytes to rank 0 at level 0.  Both meet in
//              the switch's port towards rank 0.  A sender times its transfer
//              from its call to rank 0's 4-byte acknowledgement (so bytes
//              still queued in the network count).
//   allreduce  every rank issues a BULK allreduce at level 7 and, while it
//              runs, an URGENT one at level 0; times from issue to completion
//              (the slowest rank's).
// Each iteration measures the urgent transfer solo, the bulk one solo, then
// both contended (the urgent one DELAY ms after the bulk one, once the
// link is full).  Whether packets are marked is the environment's
// (TERN_FLOW_DSCP=0,0,0: unmarked); the bed runs both, interleaved.
//
//   switch_perf [--scenario p2p|allreduce] [-b 256M] [-u 32M] [-n 3] [-d 500]
//
// Output (nccl-tests style: '#' lines, then one row per iteration and a
// median row):
//   #  iter  urgent_solo_ms urgent_cont_ms ratio bulk_solo_ms bulk_cont_ms bulk_loss_% floor_loss_%
// bulk_loss_% compares the contended bulk time with its solo time; but a
// link that carries the urgent bytes too cannot finish the bulk ones sooner
// than bulk solo + urgent solo, and floor_loss_% compares with that floor
// (what priority costs the bulk transfer beyond the bytes it let through).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "tern/tern.h"

namespace {

using ternperf::now;

void check(ternResult_t r, ternComm_t comm, const char* what) {
  if (r == ternSuccess) return;
  fprintf(stderr, "switch_perf: %s: %s\n", what, ternGetLastError(comm));
  exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Bed {
  ternComm_t comm;
  int rank;
  std::vector<char> bulk, urgent;
  int ack = 0;

  // A transfer from `from` to rank 0 at `level`, recv posted by rank 0 as
  // a request; returns the request (rank 0) or nullptr.
  ternRequest_t post(int from, std::vector<char>& buf, int level) {
    ternRequest_t req = nullptr;
    ternSetPriority(level);
    ternGroupStart();
    if (rank == 0) ternRecv(buf.data(), buf.size(), ternInt8, from, comm, nullptr);
    if (rank == from) ternSend(buf.data(), buf.size(), ternInt8, 0, comm, nullptr);
    check(ternGroupEndAsync(&req), comm, "post");
    return req;
  }

  // Rank 0 acknowledges a finished receive at level 0; the sender waits for it.
  void ackTo(int peer) {
    ternSetPriority(0);
    check(ternSend(&ack, 1, ternInt32, peer, comm, nullptr), comm, "ack");
  }
  double waitAck(double t0) {
    ternSetPriority(0);
    check(ternRecv(&ack, 1, ternInt32, 0, comm, nullptr), comm, "ack");
    return now() - t0;
  }

  // One p2p round: bulk from rank 1 (if `withBulk`), urgent from rank 2 `delay`
  // s later (if `withUrgent`).  Returns {urgent s, bulk s} on the senders (0 elsewhere).
  std::pair<double, double> p2p(bool withBulk, bool withUrgent, double delay) {
    check(ternBarrier(comm), comm, "barrier");
    double t0 = now(), tu = 0, tb = 0;
    if (rank == 0) {
      ternRequest_t rb = withBulk ? post(1, bulk, 7) : nullptr;
      ternRequest_t ru = withUrgent ? post(2, urgent, 0) : nullptr;
      if (ru) check(ternRequestWait(ru), comm, "urgent recv"), ackTo(2);
      if (rb) check(ternRequestWait(rb), comm, "bulk recv"), ackTo(1);
    } else if (rank == 1 && withBulk) {
      check(ternRequestWait(post(1, bulk, 7)), comm, "bulk send");
      tb = waitAck(t0);
    } else if (rank == 2 && withUrgent) {
      if (withBulk) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      double t1 = now();
      check(ternRequestWait(post(2, urgent, 0)), comm, "urgent send");
      tu = waitAck(t1);
    }
    return {tu, tb};
  }

  // One allreduce round, timed on every rank from each call's issue.
  std::pair<double, double> allreduce(bool withBulk, bool withUrgent, double delay) {
    check(ternBarrier(comm), comm, "barrier");
    double t0 = now(), tu = 0, tb = 0;
    ternRequest_t rb = nullptr;
    if (withBulk) {
      ternSetPriority(7);
      ternGroupStart();
      ternAllReduce(bulk.data(), bulk.data(), bulk.size() / 4, ternFloat32, ternSum, comm, nullptr);
      check(ternGroupEndAsync(&rb), comm, "bulk allreduce");
      if (withUrgent) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    }
    if (withUrgent) {
      ternSetPriority(0);
      double t1 = now();
      check(ternAllReduce(urgent.data(), urgent.data(), urgent.size() / 4, ternFloat32, ternSum,
                          comm, nullptr), comm, "urgent allreduce");
      tu = now() - t1;
    }
    if (rb) check(ternRequestWait(rb), comm, "bulk allreduce"), tb = now() - t0;
    return {tu, tb};
  }

  // The slowest rank's time (a sender's, in p2p: the others report 0).
  double slowest(double t) {
    double all[3] = {};
    ternSetPriority(0);
    check(ternAllGather(&t, all, 1, ternFloat64, comm, nullptr), comm, "gather times");
    return *std::max_element(all, all + 3);
  }

  std::pair<double, double> round(bool p2pMode, bool withBulk, bool withUrgent, double delay) {
    auto t = p2pMode ? p2p(withBulk, withUrgent, delay) : allreduce(withBulk, withUrgent, delay);
    return {slowest(t.first), slowest(t.second)};
  }
};

void usage() {
  fprintf(stderr, "usage: switch_perf [--scenario p2p|allreduce] [-b BULK] [-u URGENT] [-n ITERS] "
                  "[-d DELAY_MS]\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bulkBytes = 256 << 20, urgentBytes = 32 << 20;
  int iters = 3;
  double delay = 0.5;
  std::string scenario = "p2p";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-b") bulkBytes = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-u") urgentBytes = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-n") iters = atoi(argv[i + 1]);
    else if (a == "-d") delay = atof(argv[i + 1]) / 1e3;
    else if (a == "--scenario") scenario = argv[i + 1];
    else usage();
  }
  if ((scenario != "p2p" && scenario != "allreduce") || iters < 1) usage();
  Bed b;
  check(ternCommInitFromEnv(&b.comm), nullptr, "init");
  int nranks;
  ternCommUserRank(b.comm, &b.rank);
  ternCommCount(b.comm, &nranks);
  if (nranks != 3) {
    fprintf(stderr, "switch_perf: needs 3 ranks, not %d\n", nranks);
    return 2;
  }
  b.bulk.assign(bulkBytes / 4 * 4, 1);
  b.urgent.assign(urgentBytes / 4 * 4, 1);
  const bool p2p = scenario == "p2p";
  b.round(p2p, true, true, 0);  // warm-up: every level's connection and buffers
  ternFlowStats_t fs{};
  fs.size = sizeof fs;
  check(ternCommGetFlowStats(b.comm, &fs), b.comm, "flow stats");
  if (b.rank == 0) {
    printf("# switch_perf %s: bulk %zu MiB at level 7 (DSCP %d), urgent %zu MiB at level 0 (DSCP %d), "
           "delay %.0f ms, transport %s\n", scenario.c_str(), bulkBytes >> 20, fs.dscp[fs.flowClasses - 1],
           urgentBytes >> 20, fs.dscp[0], delay * 1e3, ternCommPeerTransport(b.comm, 1));
    printf("# %5s %14s %14s %7s %12s %12s %11s %12s\n", "iter", "urgent_solo_ms", "urgent_cont_ms",
           "ratio", "bulk_solo_ms", "bulk_cont_ms", "bulk_loss_%", "floor_loss_%");
  }
  std::vector<double> ratio, loss, floorLoss, us, uc, bs, bc;
  for (int i = 0; i < iters; ++i) {
    double soloU = b.round(p2p, false, true, 0).first;
    double soloB = b.round(p2p, true, false, 0).second;
    auto [contU, contB] = b.round(p2p, true, true, delay);
    us.push_back(soloU), uc.push_back(contU), bs.push_back(soloB), bc.push_back(contB);
    ratio.push_back(contU / soloU);
    loss.push_back((contB / soloB - 1) * 100);
    floorLoss.push_back((contB / (soloB + soloU) - 1) * 100);
    if (b.rank == 0)
      printf("  %5d %14.1f %14.1f %7.2f %12.1f %12.1f %11.1f %12.1f\n", i, soloU * 1e3, contU * 1e3,
             ratio.back(), soloB * 1e3, contB * 1e3, loss.back(), floorLoss.back());
    fflush(stdout);
  }
  if (b.rank == 0)
    printf("  %5s %14.1f %14.1f %7.2f %12.1f %12.1f %11.1f %12.1f\n", "med", median(us) * 1e3,
           median(uc) * 1e3, median(ratio), median(bs) * 1e3, median(bc) * 1e3, median(loss),
           median(floorLoss));
  ternCommDestroy(b.comm);
  return 0;
}
