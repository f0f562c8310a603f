#include "planner/priority.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <random>
#include <utility>

#include "tern/tern.h"

namespace tern::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ids may be strings or numbers (profilers write either); deps name them the same way.
std::string opId(const Json& v, const std::string& path) {
  if (v.type == Json::Type::Number) return jsonNumber(v.number);
  return expectString(v, path);
}

GraphOp::Kind parseKind(const Json& v, const std::string& path) {
  const std::string& k = expectString(v, path);
  if (k == "compute") return GraphOp::Kind::Compute;
  if (k == "recv") return GraphOp::Kind::Recv;
  if (k == "send") return GraphOp::Kind::Send;
  throw InputError(path + " must be \"compute\", \"recv\" or \"send\", not \"" + k + "\".");
}

GraphOp parseOp(const Json& v, const std::string& path, const std::map<std::string, int>& index) {
  expectOnlyFields(v, {"id", "kind", "deps", "time_ms", "param", "bytes"}, path);
  GraphOp op;
  op.id = opId(member(v, "id", path), fieldPath(path, "id"));
  op.kind = parseKind(member(v, "kind", path), fieldPath(path, "kind"));
  op.timeMs = expectNonNegative(member(v, "time_ms", path), fieldPath(path, "time_ms"));
  const Json& deps = expectArray(member(v, "deps", path), fieldPath(path, "deps"));
  for (size_t d = 0; d < deps.array.size(); ++d) {
    std::string depPath = indexPath(fieldPath(path, "deps"), d);
    auto it = index.find(opId(deps.array[d], depPath));
    if (it == index.end()) throw InputError(depPath + " names no op of the graph.");
    op.deps.push_back(it->second);
  }
  const bool transfer = op.kind != GraphOp::Kind::Compute;
  for (const char* key : {"param", "bytes"})
    if (!transfer && v.find(key)) throw InputError(fieldPath(path, key) + " belongs to recv and send ops only.");
  if (transfer) {
    op.param = expectString(member(v, "param", path), fieldPath(path, "param"));
    op.bytes = static_cast<double>(expectPositiveInteger(member(v, "bytes", path), fieldPath(path, "bytes")));
  }
  return op;
}

// The ops in an order where every op follows its deps; InputError on a cycle.
std::vector<int> topologicalOrder(const Graph& g) {
  const int n = static_cast<int>(g.ops.size());
  std::vector<int> waiting(n), order;
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i)
    for (int d : g.ops[i].deps) {
      ++waiting[i];
      users[d].push_back(i);
    }
  for (int i = 0; i < n; ++i)
    if (!waiting[i]) order.push_back(i);
  for (size_t j = 0; j < order.size(); ++j)
    for (int u : users[order[j]])
      if (--waiting[u] == 0) order.push_back(u);
  if (static_cast<int>(order.size()) != n) {
    int stuck = static_cast<int>(std::find_if(waiting.begin(), waiting.end(), [](int w) { return w > 0; }) - waiting.begin());
    throw InputError("the ops form a cycle (op \"" + g.ops[stuck].id + "\" waits on itself through its deps).");
  }
  return order;
}

// For every op, the recvs it depends on (through non-recv ops; a recv
// depends on itself only, as in TicTac), as a bitset over recv indices.
struct Closure {
  std::vector<int> recvOps;                  // recv index -> op index
  std::vector<std::vector<uint64_t>> bits;   // op index -> recv bitset
  size_t words = 0;
};

Closure recvClosure(const Graph& g) {
  Closure c;
  std::vector<int> recvIndex(g.ops.size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == GraphOp::Kind::Recv) {
      recvIndex[i] = static_cast<int>(c.recvOps.size());
      c.recvOps.push_back(static_cast<int>(i));
    }
  c.words = (c.recvOps.size() + 63) / 64;
  c.bits.assign(g.ops.size(), std::vector<uint64_t>(c.words, 0));
  for (int i : topologicalOrder(g)) {
    if (recvIndex[i] >= 0) {
      c.bits[i][recvIndex[i] / 64] |= uint64_t(1) << (recvIndex[i] % 64);
      continue;
    }
    for (int d : g.ops[i].deps)
      for (size_t w = 0; w < c.words; ++w) c.bits[i][w] |= c.bits[d][w];
  }
  return c;
}

// TicTac's P (compute unblocked by r alone), M (r's transfer time) and M+
// (cheapest set of outstanding transfers, r among them, that unblocks some
// op) over the outstanding recvs.  `opCost` is the time TicTac charges for an
// op (TIC: recv 1, others 0; TAC: measured compute and recv time).
struct Properties {
  std::vector<double> P, M, Mplus;  // by recv index
};

Properties properties(const Graph& g, const Closure& c, const std::vector<uint64_t>& outstanding,
                      const std::function<double(const GraphOp&)>& opCost) {
  const size_t R = c.recvOps.size();
  Properties pr{std::vector<double>(R, 0), std::vector<double>(R), std::vector<double>(R, kInf)};
  for (size_t r = 0; r < R; ++r) pr.M[r] = opCost(g.ops[c.recvOps[r]]);
  std::vector<int> hit;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].kind == GraphOp::Kind::Recv) continue;
    hit.clear();
    for (size_t w = 0; w < c.words; ++w)
      for (uint64_t b = c.bits[i][w] & outstanding[w]; b; b &= b - 1)
        hit.push_back(static_cast<int>(w * 64 + __builtin_ctzll(b)));
    if (hit.size() == 1) {
      pr.P[hit[0]] += opCost(g.ops[i]);
    } else if (hit.size() > 1) {
      double sum = 0;
      for (int r : hit) sum += pr.M[r];
      for (int r : hit) pr.Mplus[r] = std::min(pr.Mplus[r], sum);
    }
  }
  return pr;
}

// TIC: one pass with every recv outstanding, ascending M+; equal M+ share
// the number of the first of them.
std::vector<int> ticNumbers(const Graph& g, const Closure& c) {
  std::vector<uint64_t> all(c.words, ~uint64_t(0));
  Properties pr = properties(g, c, all, [](const GraphOp& op) { return op.kind == GraphOp::Kind::Recv ? 1.0 : 0.0; });
  std::vector<int> byMplus(c.recvOps.size());
  std::iota(byMplus.begin(), byMplus.end(), 0);
  std::stable_sort(byMplus.begin(), byMplus.end(), [&](int a, int b) { return pr.Mplus[a] < pr.Mplus[b]; });
  std::vector<int> number(c.recvOps.size());
  for (size_t j = 0; j < byMplus.size(); ++j)
    number[byMplus[j]] = (j > 0 && pr.Mplus[byMplus[j]] == pr.Mplus[byMplus[j - 1]]) ? number[byMplus[j - 1]]
                                                                                      : static_cast<int>(j);
  return number;
}

// TAC's comparison: A before B if min(P_B, M_A) < min(P_A, M_B) (Johnson's
// rule for a network stage followed by a compute stage), ties by smaller M+.
bool tacBefore(const Properties& pr, int a, int b) {
  const double x = std::min(pr.P[b], pr.M[a]), y = std::min(pr.P[a], pr.M[b]);
  if (x != y) return x < y;
  return pr.Mplus[a] < pr.Mplus[b];
}

// TAC: each round recomputes P, M, M+ over the outstanding recvs; the head
// (the one no other goes before, earlier in the graph on a tie) takes the
// next number and is no longer outstanding.
std::vector<int> tacNumbers(const Graph& g, const Closure& c) {
  const size_t R = c.recvOps.size();
  std::vector<uint64_t> outstanding(c.words, 0);
  for (size_t r = 0; r < R; ++r) outstanding[r / 64] |= uint64_t(1) << (r % 64);
  auto cost = [](const GraphOp& op) { return op.kind == GraphOp::Kind::Send ? 0.0 : op.timeMs; };
  std::vector<int> number(R, -1);
  for (size_t round = 0; round < R; ++round) {
    Properties pr = properties(g, c, outstanding, cost);
    int head = -1;
    for (size_t r = 0; r < R; ++r)
      if (number[r] < 0 && (head < 0 || tacBefore(pr, static_cast<int>(r), head))) head = static_cast<int>(r);
    number[head] = static_cast<int>(round);
    outstanding[head / 64] &= ~(uint64_t(1) << (head % 64));
  }
  return number;
}

}  // namespace

Graph parseGraph(const Json& doc) {
  expectOnlyFields(doc, {"ops"}, "");
  const Json& ops = expectArray(member(doc, "ops", ""), "ops");
  if (ops.array.empty()) throw InputError("ops must list at least one op.");
  std::map<std::string, int> index;
  for (size_t i = 0; i < ops.array.size(); ++i) {
    const std::string path = indexPath("ops", i);
    const std::string id = opId(member(ops.array[i], "id", path), fieldPath(path, "id"));
    if (!index.emplace(id, static_cast<int>(i)).second)
      throw InputError(fieldPath(path, "id") + " \"" + id + "\" is already the id of ops[" +
                       std::to_string(index[id]) + "].");
  }
  Graph g;
  for (size_t i = 0; i < ops.array.size(); ++i) g.ops.push_back(parseOp(ops.array[i], indexPath("ops", i), index));
  topologicalOrder(g);  // rejects cycles
  if (std::none_of(g.ops.begin(), g.ops.end(), [](const GraphOp& op) { return op.kind == GraphOp::Kind::Recv; }))
    throw InputError("ops has no recv op, so there is no parameter to prioritise.");
  return g;
}

Policy parsePolicy(const std::string& name) {
  if (name == "tic") return Policy::Tic;
  if (name == "tac") return Policy::Tac;
  throw InputError("the policy must be tic or tac, not \"" + name + "\".");
}

const char* policyName(Policy policy) { return policy == Policy::Tic ? "tic" : "tac"; }

Priorities assignPriorities(const Graph& graph, Policy policy) {
  const Closure c = recvClosure(graph);
  const std::vector<int> byRecv = policy == Policy::Tic ? ticNumbers(graph, c) : tacNumbers(graph, c);
  Priorities out;
  out.recvNumber.assign(graph.ops.size(), -1);
  std::vector<std::string> params;
  std::map<std::string, int> paramNumber;  // its most urgent recv
  for (size_t r = 0; r < c.recvOps.size(); ++r) {
    const int op = c.recvOps[r];
    out.recvNumber[op] = byRecv[r];
    auto [it, fresh] = paramNumber.emplace(graph.ops[op].param, byRecv[r]);
    if (fresh) params.push_back(graph.ops[op].param);
    else it->second = std::min(it->second, byRecv[r]);
  }
  std::stable_sort(params.begin(), params.end(),
                   [&](const std::string& a, const std::string& b) { return paramNumber[a] < paramNumber[b]; });
  std::vector<int> numbers;
  for (const auto& p : params) numbers.push_back(paramNumber[p]);
  out.order = params;
  out.level = levelsOf(numbers);
  return out;
}

std::vector<int> levelsOf(const std::vector<int>& numbers) {
  std::vector<int> distinct(numbers);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<int> level;
  for (int n : numbers) {
    const size_t j = std::lower_bound(distinct.begin(), distinct.end(), n) - distinct.begin();
    level.push_back(static_cast<int>(j * TERN_PRIORITY_LEVELS / distinct.size()));
  }
  return level;
}

std::string prioritiesJson(const Priorities& pr, Policy policy) {
  std::string order, levels;
  for (size_t i = 0; i < pr.order.size(); ++i) {
    order += (i ? ", " : "") + jsonString(pr.order[i]);
    levels += (i ? ", " : "") + jsonString(pr.order[i]) + ": " + std::to_string(pr.level[i]);
  }
  return std::string("{\"policy\": ") + jsonString(policyName(policy)) + ", \"order\": [" + order +
         "], \"priority\": {" + levels + "}}\n";
}

namespace {

// List scheduling of one iteration on three resources (compute, incoming
// link, outgoing link), each running its most urgent ready op when idle.
double makespan(const Graph& g, const std::vector<int>& recvNumber) {
  const int n = static_cast<int>(g.ops.size());
  auto resource = [&](int i) { return static_cast<int>(g.ops[i].kind); };  // Compute 0, Recv 1, Send 2
  std::vector<int> waiting(n);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i)
    for (int d : g.ops[i].deps) {
      ++waiting[i];
      users[d].push_back(i);
    }
  using Ready = std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>, std::greater<>>;
  Ready ready[3];
  auto makeReady = [&](int i) {
    const int64_t key = g.ops[i].kind == GraphOp::Kind::Recv ? int64_t(recvNumber[i]) * n + i : i;
    ready[resource(i)].push({key, i});
  };
  for (int i = 0; i < n; ++i)
    if (!waiting[i]) makeReady(i);
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> running;
  bool busy[3] = {false, false, false};
  double now = 0;
  for (;;) {
    for (int r = 0; r < 3; ++r)
      if (!busy[r] && !ready[r].empty()) {
        const int i = ready[r].top().second;
        ready[r].pop();
        running.push({now + g.ops[i].timeMs, i});
        busy[r] = true;
      }
    if (running.empty()) return now;
    now = running.top().first;
    while (!running.empty() && running.top().first == now) {  // all that end now, before choosing again
      const int i = running.top().second;
      running.pop();
      busy[resource(i)] = false;
      for (int u : users[i])
        if (--waiting[u] == 0) makeReady(u);
    }
  }
}

double criticalPath(const Graph& g) {
  std::vector<double> finish(g.ops.size(), 0);
  double longest = 0;
  for (int i : topologicalOrder(g)) {
    double start = 0;
    for (int d : g.ops[i].deps) start = std::max(start, finish[d]);
    finish[i] = start + g.ops[i].timeMs;
    longest = std::max(longest, finish[i]);
  }
  return longest;
}

}  // namespace

Efficiency efficiency(const Graph& graph, const std::vector<int>& recvNumber) {
  double total[3] = {0, 0, 0};
  for (const GraphOp& op : graph.ops) total[static_cast<int>(op.kind)] += op.timeMs;
  Efficiency e;
  e.makespanMs = makespan(graph, recvNumber);
  e.upperMs = total[0] + total[1] + total[2];
  e.lowerMs = std::max({total[0], total[1], total[2], criticalPath(graph)});
  e.efficiency = e.upperMs > e.lowerMs ? (e.upperMs - e.makespanMs) / (e.upperMs - e.lowerMs) : 1.0;
  return e;
}

double randomOrderEfficiency(const Graph& graph, int samples, uint64_t seed) {
  std::vector<int> recvs;
  for (size_t i = 0; i < graph.ops.size(); ++i)
    if (graph.ops[i].kind == GraphOp::Kind::Recv) recvs.push_back(static_cast<int>(i));
  std::mt19937_64 rng(seed);
  std::vector<int> numbers(graph.ops.size(), -1), ranks(recvs.size());
  std::iota(ranks.begin(), ranks.end(), 0);
  double sum = 0;
  for (int s = 0; s < samples; ++s) {
    std::shuffle(ranks.begin(), ranks.end(), rng);
    for (size_t r = 0; r < recvs.size(); ++r) numbers[recvs[r]] = ranks[r];
    sum += efficiency(graph, numbers).efficiency;
  }
  return sum / samples;
}

}  // namespace tern::planner
