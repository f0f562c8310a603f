// What hwloc sees of one host, reduced to what tern decides with, and the
// decisions themselves: which GPU and NIC a rank uses and where its progress
// thread runs.  Discovery (hwloc_topology.cc) and deciding (placement.cc) are
// apart so tests can feed hand-written XML topologies to the same decisions.
#pragma once
#include <string>
#include <vector>

#include "tern/tern.h"

namespace tern {

using PuSet = std::vector<int>;  // sorted OS indices of processing units

struct TopoCore {
  int osIndex = 0;
  int package = -1;  // logical index of its package
  int numa = -1;     // OS index of its NUMA node
  PuSet pus;
};

// A GPU or NIC on the PCI tree.
struct TopoDevice {
  std::string busid;     // 0000:17:00.0
  std::string name;      // netdev (eth0) or GPU OS device (cuda0, card1)
  std::string rdmaName;  // verbs device (mlx5_0) when the NIC does RDMA
  PuSet localPus;        // PUs of the nearest CPU-side ancestor
  int package = -1, numa = -1;
  std::vector<unsigned long long> path;  // hwloc object ids, root first: the PCI route
};

struct Topology {
  std::string source;  // "this host" or the XML file
  int packages = 0, numaNodes = 0;
  std::vector<TopoCore> cores;
  std::vector<TopoDevice> gpus, nics;  // in PCI bus order
  PuSet allowedPus;  // this process's cpuset (live) or the topology's allowed set (XML)
};

// Discovers this host ("" ) or loads an hwloc XML file.  The live topology is
// read once per process and cached (hwloc takes ~40 ms with I/O devices).
ternResult_t loadTopology(const std::string& xmlPath, Topology* out);

// Hops between two devices through their lowest common ancestor: 2 under one
// PCI switch, more across the host bridge or the CPU interconnect.
int pciDistance(const TopoDevice& a, const TopoDevice& b);

struct Placement {
  int localRank = 0, localSize = 1;
  int gpu = -1;       // index into Topology::gpus, -1: none
  int nic = -1;       // index into Topology::nics, -1: none
  int nicDistance = -1;
  int core = -1;      // index into Topology::cores for the progress thread
  PuSet pinPus;       // where the progress thread is bound; empty: not bound
  std::string why;    // the reasons, for the dump and the INFO log
};

// pinMode: "auto" binds the progress thread when the device's locality is
// narrower than the process's cpuset (a choice that matters), "on" always,
// "off" never.  gpuOverride >= 0 names the rank's GPU (TERN_GPU).
Placement decidePlacement(const Topology& t, int localRank, int localSize, int gpuOverride,
                          const std::string& pinMode);

// Human-readable account of what was detected and decided (TERN_TOPO_DUMP).
std::string describeTopology(const Topology& t, const Placement& p, int rank, int nranks);

std::string formatPus(const PuSet& s);  // "0-3,8,10-11"

}  // namespace tern
