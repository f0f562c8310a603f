#include "topology/hosts.h"

#include <algorithm>
#include <unordered_map>

namespace tern {

int HostLayout::minLocal() const {
  int m = 0;
  for (const auto& h : members) m = m == 0 ? static_cast<int>(h.size()) : std::min(m, static_cast<int>(h.size()));
  return m;
}

int HostLayout::maxLocal() const {
  int m = 0;
  for (const auto& h : members) m = std::max(m, static_cast<int>(h.size()));
  return m;
}

HostLayout groupByHost(const std::vector<uint64_t>& ids) {
  HostLayout h;
  const int n = static_cast<int>(ids.size());
  h.hostOf.assign(n, 0);
  h.localRank.assign(n, 0);
  std::unordered_map<uint64_t, int> index;  // identity -> host, in order of lowest rank
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = index.emplace(ids[r], h.hosts());
    if (fresh) h.members.emplace_back();
    h.hostOf[r] = it->second;
    h.localRank[r] = static_cast<int>(h.members[it->second].size());
    h.members[it->second].push_back(r);
  }
  return h;
}

std::string describeHosts(const HostLayout& h) {
  constexpr int kShown = 8;  // hosts listed; a job of thousands gets a short line
  std::string s = std::to_string(h.hosts()) + (h.hosts() == 1 ? " host" : " hosts");
  if (h.minLocal() == h.maxLocal()) {
    s += " x " + std::to_string(h.minLocal()) + (h.minLocal() == 1 ? " rank" : " ranks");
  } else if (h.hosts() <= kShown) {
    s += " (";
    for (int k = 0; k < h.hosts(); ++k)
      s += (k ? "+" : "") + std::to_string(h.members[k].size());
    s += " ranks)";
  } else {
    s += " (" + std::to_string(h.minLocal()) + " to " + std::to_string(h.maxLocal()) + " ranks each)";
  }
  s += ":";
  for (int k = 0; k < h.hosts() && k < kShown; ++k) {
    s += " {";
    for (size_t i = 0; i < h.members[k].size(); ++i)
      s += (i ? "," : "") + std::to_string(h.members[k][i]);
    s += "}";
  }
  if (h.hosts() > kShown) s += " ...";
  return s;
}

}  // namespace tern
