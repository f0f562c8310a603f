// Which ranks share a host.  Every rank publishes its host identity in the
// bootstrap exchange (comm/bootstrap.h, hostIdentity: hostname, boot id and
// network namespace, or TERN_HOST_ID); the table is the same on every rank,
// so every rank derives the same layout from it without a word on any
// socket.  Plans read it (PlanCtx::hosts) to run a collective in two levels:
// among the ranks of a host over shared memory, and across hosts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tern {

struct HostLayout {
  // Host h's ranks in ascending order; hosts in order of their lowest rank
  // (the ring's order, comm.cc: it crosses each host boundary once).
  std::vector<std::vector<int>> members;
  std::vector<int> hostOf;     // rank -> host index
  std::vector<int> localRank;  // rank -> its index among its host's ranks

  int hosts() const { return static_cast<int>(members.size()); }
  int localSize(int rank) const { return static_cast<int>(members[hostOf[rank]].size()); }
  // The fewest and most ranks any host has (equal: every host alike).
  int minLocal() const;
  int maxLocal() const;
};

// The layout of ranks whose host identities are `ids` (ids[r] is rank r's).
HostLayout groupByHost(const std::vector<uint64_t>& ids);

// One line for the INFO log: "2 hosts x 2 ranks: {0,1} {2,3}" or, uneven,
// "2 hosts (3+1 ranks): {0,1,2} {3}".  Past 8 hosts the lists are cut.
std::string describeHosts(const HostLayout& h);

}  // namespace tern
