// Placement decisions from a Topology.  Every local rank runs the same
// deterministic procedure for local ranks 0..itself, so ranks of one host
// spread over equally good NICs and cores without talking to each other.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "topology/topology.h"

namespace tern {

namespace {

PuSet intersect(const PuSet& a, const PuSet& b) {
  PuSet r;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
  return r;
}

// NICs nearest the GPU (or, without one, NICs local to the allowed CPUs);
// among those the one fewest lower local ranks took, then the lowest.
int pickNic(const Topology& t, int gpu, const std::vector<int>& uses, int* distance) {
  int best = -1, bestDist = 0;
  for (int i = 0; i < static_cast<int>(t.nics.size()); ++i) {
    const TopoDevice& n = t.nics[i];
    int d = gpu >= 0 ? pciDistance(t.gpus[gpu], n)
                     : (intersect(n.localPus, t.allowedPus).empty() ? 1 : 0);
    if (best < 0 || d < bestDist || (d == bestDist && uses[i] < uses[best])) {
      best = i;
      bestDist = d;
    }
  }
  *distance = bestDist;
  return best;
}

// Cores that share a PU with `near`, searched from the highest: applications
// and OpenMP fill cores from 0, so the progress thread keeps out of their way.
int pickCore(const Topology& t, const PuSet& near, const std::vector<int>& uses) {
  int best = -1;
  for (int i = static_cast<int>(t.cores.size()) - 1; i >= 0; --i) {
    if (intersect(t.cores[i].pus, near).empty()) continue;
    if (best < 0 || uses[i] < uses[best]) best = i;
  }
  return best;
}

struct Choice {
  int gpu = -1, nic = -1, nicDistance = -1, core = -1;
  PuSet near;  // where the rank's devices are, within its cpuset
};

Choice chooseFor(const Topology& t, int localRank, int gpuOverride, std::vector<int>& nicUses,
                 std::vector<int>& coreUses) {
  Choice c;
  if (gpuOverride >= 0 && gpuOverride < static_cast<int>(t.gpus.size())) c.gpu = gpuOverride;
  else if (!t.gpus.empty()) c.gpu = localRank % static_cast<int>(t.gpus.size());
  c.nic = pickNic(t, c.gpu, nicUses, &c.nicDistance);
  if (c.nic >= 0) ++nicUses[c.nic];
  const PuSet& dev = c.gpu >= 0 ? t.gpus[c.gpu].localPus
                     : c.nic >= 0 ? t.nics[c.nic].localPus : t.allowedPus;
  c.near = intersect(dev, t.allowedPus);
  if (c.near.empty()) c.near = t.allowedPus;  // the device is outside our cpuset
  c.core = pickCore(t, c.near, coreUses);
  if (c.core >= 0) ++coreUses[c.core];
  return c;
}

}  // namespace

int pciDistance(const TopoDevice& a, const TopoDevice& b) {
  size_t common = 0;
  while (common < a.path.size() && common < b.path.size() && a.path[common] == b.path[common])
    ++common;
  return static_cast<int>(a.path.size() + b.path.size() - 2 * common);
}

Placement decidePlacement(const Topology& t, int localRank, int localSize, int gpuOverride,
                          const std::string& pinMode) {
  Placement p;
  p.localRank = localRank;
  p.localSize = localSize;
  std::vector<int> nicUses(t.nics.size(), 0), coreUses(t.cores.size(), 0);
  Choice c;
  for (int r = 0; r <= localRank; ++r)
    c = chooseFor(t, r, r == localRank ? gpuOverride : -1, nicUses, coreUses);
  p.gpu = c.gpu;
  p.nic = c.nic;
  p.nicDistance = c.nicDistance;
  p.core = c.core;
  std::ostringstream why;
  if (p.gpu >= 0)
    why << "GPU " << p.gpu << (gpuOverride >= 0 ? " (TERN_GPU)" : " (local rank mod GPUs)") << "; ";
  if (p.nic >= 0)
    why << "NIC " << p.nic << (p.gpu >= 0 ? " nearest that GPU (" + std::to_string(p.nicDistance) +
                                                " PCI hops), least shared"
                                          : " local to our CPUs, least shared")
        << "; ";
  bool narrower = c.near.size() < t.allowedPus.size();
  bool pin = p.core >= 0 && (pinMode == "on" || (pinMode == "auto" && narrower));
  if (pin) p.pinPus = intersect(t.cores[p.core].pus, c.near);
  why << "progress thread "
      << (pin ? "bound to core " + std::to_string(t.cores[p.core].osIndex) +
                    (narrower ? " near the device" : " (TERN_PIN_PROGRESS=on)")
              : pinMode == "off" ? std::string("not bound (TERN_PIN_PROGRESS=off)")
                                 : std::string("not bound: every allowed CPU is equally near"));
  p.why = why.str();
  return p;
}

std::string formatPus(const PuSet& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j + 1 < s.size() && s[j + 1] == s[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(s[i]);
    if (j > i) out += '-' + std::to_string(s[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

std::string describeTopology(const Topology& t, const Placement& p, int rank, int nranks) {
  std::ostringstream o;
  o << "tern topology of rank " << rank << " of " << nranks << " (local " << p.localRank << " of "
    << p.localSize << "), from " << t.source << "\n";
  o << "packages " << t.packages << ", NUMA nodes " << t.numaNodes << ", cores " << t.cores.size()
    << ", allowed PUs " << formatPus(t.allowedPus) << "\n";
  auto device = [&](const char* kind, size_t i, const TopoDevice& d) {
    o << kind << ' ' << i << ' ' << d.busid << " name " << (d.name.empty() ? "-" : d.name);
    if (!d.rdmaName.empty()) o << " rdma " << d.rdmaName;
    o << " package " << d.package << " numa " << d.numa << " PUs " << formatPus(d.localPus) << "\n";
  };
  for (size_t i = 0; i < t.gpus.size(); ++i) device("gpu", i, t.gpus[i]);
  for (size_t i = 0; i < t.nics.size(); ++i) device("nic", i, t.nics[i]);
  o << "decision gpu " << p.gpu;
  if (p.gpu >= 0) o << " (" << t.gpus[p.gpu].busid << ")";
  o << " nic " << p.nic;
  if (p.nic >= 0) {
    const TopoDevice& n = t.nics[p.nic];
    o << " (" << (n.rdmaName.empty() ? n.name : n.rdmaName) << " " << n.busid << ")";
  }
  o << " core " << (p.core >= 0 ? t.cores[p.core].osIndex : -1) << " pinned "
    << (p.pinPus.empty() ? "no" : formatPus(p.pinPus)) << "\n";
  o << "why " << p.why << "\n";
  return o.str();
}

}  // namespace tern
