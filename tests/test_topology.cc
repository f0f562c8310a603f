// Topology discovery and placement decisions on hand-written hwloc XML hosts
// (tests/topologies/, made by generate.py there) and on this host.
#include <gtest/gtest.h>

#include <string>

#include "topology/topology.h"

using namespace tern;

namespace {

Topology load(const char* name) {
  Topology t;
  EXPECT_EQ(loadTopology(std::string(TOPO_DIR) + "/" + name, &t), ternSuccess);
  return t;
}

PuSet range(int lo, int hi) {  // [lo, hi]
  PuSet s;
  for (int i = lo; i <= hi; ++i) s.push_back(i);
  return s;
}

PuSet join(PuSet a, const PuSet& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  return a;
}

int coreOs(const Topology& t, const Placement& p) { return p.core >= 0 ? t.cores[p.core].osIndex : -1; }

}  // namespace

TEST(Topology, TwoSocketEightGpuFourNicIsReadAsWritten) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.numaNodes, 2);
  ASSERT_EQ(t.cores.size(), 16u);
  EXPECT_EQ(t.cores[9].package, 1);
  EXPECT_EQ(t.cores[9].pus, (PuSet{9, 25}));
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 4u);
  EXPECT_EQ(t.allowedPus, range(0, 31));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(t.nics[k].rdmaName, "mlx5_" + std::to_string(k));
    EXPECT_EQ(t.nics[k].name, "ib" + std::to_string(k));
  }
  EXPECT_EQ(t.gpus[5].name, "cuda5");
  EXPECT_EQ(t.gpus[5].package, 1);
  EXPECT_EQ(t.gpus[0].localPus, join(range(0, 7), range(16, 23)));
  EXPECT_EQ(t.gpus[7].localPus, join(range(8, 15), range(24, 31)));
}

TEST(Topology, PciDistanceCountsHopsThroughTheTree) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  EXPECT_EQ(pciDistance(t.gpus[0], t.gpus[1]), 2);  // one switch
  EXPECT_EQ(pciDistance(t.gpus[0], t.nics[0]), 2);
  EXPECT_EQ(pciDistance(t.gpus[0], t.nics[1]), 6);  // other switch, same package
  EXPECT_EQ(pciDistance(t.gpus[0], t.nics[2]), 8);  // other package
  EXPECT_EQ(pciDistance(t.gpus[3], t.nics[1]), 2);
}

TEST(Placement, EightRanksGetTheirGpuTheNicOnItsSwitchAndALocalCore) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  for (int r = 0; r < 8; ++r) {
    Placement p = decidePlacement(t, r, 8, -1, "auto");
    SCOPED_TRACE("local rank " + std::to_string(r));
    EXPECT_EQ(p.gpu, r);
    EXPECT_EQ(p.nic, r / 2);
    EXPECT_EQ(p.nicDistance, 2);
    // Cores of the GPU's package, from the highest down, one per rank.
    int expectCore = (r < 4 ? 7 : 15) - r % 4;
    EXPECT_EQ(coreOs(t, p), expectCore);
    EXPECT_EQ(p.pinPus, (PuSet{expectCore, expectCore + 16}));
  }
}

TEST(Placement, SixteenRanksShareGpusTwoEachAndStillSpreadCores) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  std::vector<int> coreSeen(32, 0);
  for (int r = 0; r < 16; ++r) {
    Placement p = decidePlacement(t, r, 16, -1, "auto");
    EXPECT_EQ(p.gpu, r % 8);
    EXPECT_EQ(p.nic, (r % 8) / 2);
    ++coreSeen[coreOs(t, p)];
  }
  for (int c = 0; c < 16; ++c) EXPECT_EQ(coreSeen[c], 1) << "core " << c;
}

TEST(Placement, TernGpuOverridesTheLocalRankAndMovesTheNic) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  Placement p = decidePlacement(t, 0, 1, 5, "auto");
  EXPECT_EQ(p.gpu, 5);
  EXPECT_EQ(p.nic, 2);
  EXPECT_EQ(t.cores[p.core].package, 1);
  EXPECT_NE(p.why.find("TERN_GPU"), std::string::npos) << p.why;
}

TEST(Placement, ACpusetAwayFromTheGpuIsRespected) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  t.allowedPus = join(range(8, 15), range(24, 31));  // bound to package 1, GPU 0 on package 0
  Placement p = decidePlacement(t, 0, 1, 0, "auto");
  EXPECT_EQ(p.nic, 0);  // the NIC still follows the GPU
  ASSERT_GE(p.core, 0);
  EXPECT_EQ(t.cores[p.core].package, 1);  // but the thread stays inside the cpuset
  EXPECT_TRUE(p.pinPus.empty()) << "every allowed CPU is equally near: nothing to gain";
  p = decidePlacement(t, 0, 1, 0, "on");
  EXPECT_EQ(p.pinPus, (PuSet{15, 31}));
}

TEST(Placement, WithoutGpusRanksSpreadOverNicsLocalToTheirCpus) {
  Topology t = load("two_socket_2nic.xml");
  EXPECT_TRUE(t.gpus.empty());
  ASSERT_EQ(t.nics.size(), 2u);
  EXPECT_EQ(t.nics[1].name, "eth1");
  EXPECT_TRUE(t.nics[1].rdmaName.empty());
  Placement a = decidePlacement(t, 0, 2, -1, "auto"), b = decidePlacement(t, 1, 2, -1, "auto");
  EXPECT_EQ(a.nic, 0);
  EXPECT_EQ(b.nic, 1);
  EXPECT_EQ(coreOs(t, a), 7);
  EXPECT_EQ(coreOs(t, b), 15);
  t.allowedPus = join(range(8, 15), range(24, 31));
  Placement c = decidePlacement(t, 0, 1, -1, "auto");
  EXPECT_EQ(c.nic, 1);  // the NIC on our package
  EXPECT_TRUE(c.pinPus.empty());
}

TEST(Placement, AHostWithoutDevicesPinsOnlyWhenAskedTo) {
  Topology t = load("no_devices.xml");
  EXPECT_EQ(t.packages, 1);
  EXPECT_EQ(t.cores.size(), 4u);
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_TRUE(t.nics.empty());
  Placement p = decidePlacement(t, 0, 2, -1, "auto");
  EXPECT_EQ(p.gpu, -1);
  EXPECT_EQ(p.nic, -1);
  EXPECT_TRUE(p.pinPus.empty());
  EXPECT_NE(p.why.find("equally near"), std::string::npos) << p.why;
  EXPECT_EQ(decidePlacement(t, 0, 2, -1, "on").pinPus, (PuSet{3}));
  EXPECT_EQ(decidePlacement(t, 1, 2, -1, "on").pinPus, (PuSet{2}));
  EXPECT_TRUE(decidePlacement(t, 1, 2, -1, "off").pinPus.empty());
}

TEST(Placement, DumpNamesWhatWasDetectedAndDecided) {
  Topology t = load("two_socket_8gpu_4nic.xml");
  Placement p = decidePlacement(t, 3, 8, -1, "auto");
  std::string d = describeTopology(t, p, 11, 16);
  EXPECT_NE(d.find("rank 11 of 16 (local 3 of 8)"), std::string::npos) << d;
  EXPECT_NE(d.find("packages 2, NUMA nodes 2, cores 16, allowed PUs 0-31"), std::string::npos) << d;
  EXPECT_NE(d.find("nic 3 0000:"), std::string::npos) << d;
  EXPECT_NE(d.find("rdma mlx5_3"), std::string::npos) << d;
  EXPECT_NE(d.find("decision gpu 3"), std::string::npos) << d;
  EXPECT_NE(d.find("nic 1 (mlx5_1"), std::string::npos) << d;
  EXPECT_NE(d.find("pinned 4,20"), std::string::npos) << d;
}

TEST(Topology, FormatPusWritesRanges) {
  EXPECT_EQ(formatPus({}), "none");
  EXPECT_EQ(formatPus({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

TEST(Topology, AMissingXmlIsAnInvalidArgument) {
  Topology t;
  EXPECT_EQ(loadTopology("/nonexistent/topo.xml", &t), ternInvalidArgument);
}

TEST(Topology, ThisHostLoadsWithItsCpuset) {
  Topology t;
  ASSERT_EQ(loadTopology("", &t), ternSuccess);
  EXPECT_GE(t.packages, 1);
  ASSERT_FALSE(t.cores.empty());
  ASSERT_FALSE(t.allowedPus.empty());
  for (int pu : t.allowedPus) {
    bool found = false;
    for (auto& c : t.cores) found |= std::count(c.pus.begin(), c.pus.end(), pu) > 0;
    EXPECT_TRUE(found) << "PU " << pu << " belongs to no core";
  }
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(static_cast<int>(t.allowedPus.size()), CPU_COUNT(&set));
}
