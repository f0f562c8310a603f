#include "planner/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "planner/svg.h"

namespace tern::planner {

using model::Algo;

namespace {

// Every algorithm's prediction at every size, and the choice at each.
struct Grid {
  model::Model model;
  std::vector<Algo> algos;
  std::vector<model::Call> calls;                      // per size
  std::vector<std::vector<model::Prediction>> preds;   // [size][algo]
  std::vector<model::Choice> choices;                  // per size
};

Grid simulate(const CollectivesQuery& q, const model::Model& base) {
  Grid g;
  g.model = base;
  if (q.gbps > 0) model::setNetwork(g.model, q.net, q.gbps, q.latencyUs);
  else if (q.latencyUs >= 0) {
    auto& l = g.model.links[static_cast<int>(q.net)];
    l.latencyUs = l.smallLatencyUs = q.latencyUs;
  }
  g.algos = {Algo::Small, Algo::RecursiveDoubling, Algo::Ring, Algo::TwoLevel};
  if (q.ternary) g.algos.insert(g.algos.end(), {Algo::Ternary, Algo::TernaryTwoLevel});
  for (double bytes : q.sizes) {
    model::Call c;
    c.bytes = bytes;
    c.layout = q.layout;
    c.dtypeBytes = q.dtypeBytes;
    c.net = q.net;
    std::vector<model::Prediction> row;
    for (Algo a : g.algos) row.push_back(model::predict(a, c, g.model));
    g.calls.push_back(c);
    g.preds.push_back(row);
    g.choices.push_back(model::choose(c, q.ternary, g.model, q.limits));
  }
  return g;
}

std::string layoutText(const model::Layout& l) {
  std::set<int> sizes(l.ranksPerHost.begin(), l.ranksPerHost.end());
  if (sizes.size() == 1)
    return std::to_string(l.hosts()) + " hosts x " + std::to_string(*sizes.begin()) + " ranks = " +
           std::to_string(l.ranks()) + " ranks";
  std::string s;
  for (int h = 0; h < l.hosts() && h < 8; ++h) s += (h ? "+" : "") + std::to_string(l.ranksPerHost[h]);
  if (l.hosts() > 8) s += "+...";
  return std::to_string(l.hosts()) + " hosts (" + s + ") = " + std::to_string(l.ranks()) + " ranks";
}

std::string number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Reads a list of positive whole numbers at `path`.
std::vector<double> positiveIntegers(const Json& v, const std::string& path, int64_t hi) {
  std::vector<double> out;
  const auto& items = expectArray(v, path).array;
  for (size_t i = 0; i < items.size(); ++i)
    out.push_back(static_cast<double>(expectIntegerIn(items[i], indexPath(path, i), 1, hi)));
  if (out.empty()) throw InputError(path + " must list at least one value.");
  return out;
}

}  // namespace

CollectivesQuery parseCollectivesQuery(const Json& doc) {
  expectObject(doc, "the query");
  expectOnlyFields(doc, {"hosts", "ranks_per_host", "sizes", "ternary", "link", "gbps", "latency_us", "dtype_bytes",
                         "small_bytes", "ternary_min_bytes", "max_bits"}, "");
  CollectivesQuery q;
  constexpr int kMostRanks = 1 << 20;  // recursive doubling's rounds look at every rank
  const int hosts = static_cast<int>(expectIntegerIn(member(doc, "hosts", ""), "hosts", 1, kMostRanks));
  const Json& per = member(doc, "ranks_per_host", "");
  std::vector<double> counts;
  if (per.type == Json::Type::Array) {
    counts = positiveIntegers(per, "ranks_per_host", kMostRanks);
    if (static_cast<int>(counts.size()) != hosts)
      throw InputError("ranks_per_host lists " + std::to_string(counts.size()) + " hosts, not " +
                       std::to_string(hosts) + ".");
  } else {
    counts.assign(hosts, static_cast<double>(expectIntegerIn(per, "ranks_per_host", 1, kMostRanks)));
  }
  double ranks = 0;
  for (double c : counts) ranks += c;
  if (ranks > kMostRanks)
    throw InputError("the simulator takes at most " + std::to_string(kMostRanks) + " ranks, not " + jsonNumber(ranks) +
                     ".");
  for (double c : counts) q.layout.ranksPerHost.push_back(static_cast<int>(c));
  q.sizes = positiveIntegers(member(doc, "sizes", ""), "sizes", int64_t(1) << 50);
  if (const Json* t = doc.find("ternary")) {
    if (t->type != Json::Type::Bool) throw InputError("ternary must be true or false.");
    q.ternary = t->boolean;
  }
  if (const Json* l = doc.find("link")) {
    const std::string& name = expectString(*l, "link");
    if (!model::parseLink(name, &q.net) || q.net == model::Link::Shm)
      throw InputError("link must be tcp or ucx (the class between hosts), not \"" + name + "\".");
  }
  if (const Json* v = doc.find("gbps")) q.gbps = expectPositive(*v, "gbps");
  if (const Json* v = doc.find("latency_us")) q.latencyUs = expectNonNegative(*v, "latency_us");
  if (const Json* v = doc.find("dtype_bytes")) q.dtypeBytes = static_cast<int>(expectIntegerIn(*v, "dtype_bytes", 1, 16));
  if (const Json* v = doc.find("small_bytes")) q.limits.smallBytes = expectNonNegative(*v, "small_bytes");
  if (const Json* v = doc.find("ternary_min_bytes")) q.limits.ternaryMinBytes = expectNonNegative(*v, "ternary_min_bytes");
  if (const Json* v = doc.find("max_bits")) q.limits.maxWidth = static_cast<int>(expectIntegerIn(*v, "max_bits", 2, 64));
  return q;
}

std::string collectivesJson(const CollectivesQuery& q, const model::Model& base) {
  const Grid g = simulate(q, base);
  std::string out = "{\"hosts\": " + std::to_string(q.layout.hosts()) + ", \"ranks\": " +
                    std::to_string(q.layout.ranks()) + ", \"ranks_per_host\": [";
  for (int h = 0; h < q.layout.hosts(); ++h) out += (h ? ", " : "") + std::to_string(q.layout.ranksPerHost[h]);
  out += "], \"link\": \"" + std::string(model::linkName(q.net)) + "\", \"dtype_bytes\": " +
         std::to_string(q.dtypeBytes) + ", \"model\": " + jsonString(g.model.source) + ",\n \"predictions\": [";
  bool first = true;
  for (size_t s = 0; s < q.sizes.size(); ++s)
    for (const model::Prediction& p : g.preds[s]) {
      if (!p.applies) continue;
      std::string why;
      const bool ok = model::runnable(p, g.calls[s], q.limits, &why);
      out += std::string(first ? "\n  " : ",\n  ") + "{\"algorithm\": \"" + model::algoName(p.algo) +
             "\", \"bytes\": " + jsonNumber(q.sizes[s]) + ", \"ternary\": " + (model::isTernary(p.algo) ? "true" : "false") +
             ", \"time_us\": " + jsonNumber(p.timeUs) + ", \"bits\": " + std::to_string(p.bits) +
             ", \"runnable\": " + (ok ? "true" : "false") + (ok ? "" : ", \"why\": " + jsonString(why)) + "}";
      first = false;
    }
  out += "],\n \"choice\": {";
  for (size_t s = 0; s < q.sizes.size(); ++s)
    out += std::string(s ? ",\n  " : "\n  ") + "\"" + jsonNumber(q.sizes[s]) + "\": {\"algorithm\": \"" +
           model::algoName(g.choices[s].algo) + "\", \"time_us\": " + jsonNumber(g.choices[s].timeUs) +
           ", \"bits\": " + std::to_string(g.choices[s].bits) + "}";
  return out + "}}\n";
}

std::string collectivesTable(const CollectivesQuery& q, const model::Model& base) {
  const Grid g = simulate(q, base);
  const model::LinkParams& net = g.model.links[static_cast<int>(q.net)];
  const int N = q.layout.ranks();
  std::string out = "# tern-plan collectives: allreduce, " + layoutText(q.layout) + ", " + model::linkName(q.net) +
                    " between hosts at " + number("%.3g", 8 / net.nsPerByte / model::kTcpWireShare) +
                    " Gbit/s (" + number("%.3g", net.latencyUs) + " us a step), " + std::to_string(q.dtypeBytes) +
                    "-byte elements" + (q.ternary ? ", ternary" : "") + "\n# model: " + g.model.source + "\n";
  if (q.ternary)
    out += "# bits per element: ternary " + std::to_string(model::ternaryWidth(N)) + " (a sum of " +
           std::to_string(N) + " ranks), ternary-twolevel " + std::to_string(model::ternaryWidth(q.layout.hosts())) +
           " (a sum of " + std::to_string(q.layout.hosts()) + " hosts)\n";
  out += "#\n# predicted time (us) per algorithm; * may not run here (below); - does not apply\n";
  std::string head = "#       size        count", units = "#        (B)   (elements)";
  for (Algo a : g.algos) {
    const std::string name = model::algoName(a);
    const size_t w = std::max<size_t>(12, name.size() + 2);
    head += std::string(w - name.size(), ' ') + name;
    units += std::string(w, ' ');
  }
  out += head + "   choice              time(us)  algbw(GB/s)  busbw(GB/s)\n" + units + "\n";
  std::map<std::string, std::set<std::string>> notes;  // algorithm -> why it may not run
  for (size_t s = 0; s < q.sizes.size(); ++s) {
    out += number("%12.0f", q.sizes[s]) + number(" %12.0f", std::floor(q.sizes[s] / q.dtypeBytes));
    for (size_t i = 0; i < g.algos.size(); ++i) {
      const model::Prediction& p = g.preds[s][i];
      const size_t w = std::max<size_t>(12, std::string(model::algoName(p.algo)).size() + 2);
      std::string cell = "-", why;
      if (p.applies) {
        cell = number("%.1f", p.timeUs);
        if (!model::runnable(p, g.calls[s], q.limits, &why)) {
          cell += "*";
          notes[model::algoName(p.algo)].insert(why);
        } else {
          cell += " ";
        }
      }
      out += std::string(w > cell.size() ? w - cell.size() : 1, ' ') + cell;
    }
    const model::Choice& c = g.choices[s];
    const double algbw = c.timeUs > 0 ? q.sizes[s] / c.timeUs / 1e3 : 0;
    char tail[160];
    std::snprintf(tail, sizeof tail, "   %-16s %12.1f %12.3f %12.3f\n", model::algoName(c.algo), c.timeUs, algbw,
                  algbw * 2 * (N - 1) / std::max(N, 1));
    out += tail;
  }
  for (const auto& [algo, whys] : notes)
    for (const std::string& why : whys) out += "# * " + algo + ": " + why + "\n";
  return out;
}

std::string collectivesSvg(const CollectivesQuery& q, const model::Model& base) {
  const Grid g = simulate(q, base);
  constexpr double kW = 960, kH = 600, kLeft = 90, kRight = 190, kTop = 60, kBottom = 60;
  static const char* const kColours[] = {"#9d755d", "#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756"};
  double lo = 1e300, hi = 0;
  for (const auto& row : g.preds)
    for (const auto& p : row)
      if (p.applies && p.timeUs > 0) lo = std::min(lo, p.timeUs), hi = std::max(hi, p.timeUs);
  if (hi <= 0) lo = 1, hi = 10;
  const double y0 = std::floor(std::log10(lo)), y1 = std::max(y0 + 1, std::ceil(std::log10(hi)));
  const double x0 = std::log2(*std::min_element(q.sizes.begin(), q.sizes.end()));
  const double x1 = std::max(x0 + 1, std::log2(*std::max_element(q.sizes.begin(), q.sizes.end())));
  auto X = [&](double bytes) { return kLeft + (std::log2(bytes) - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto Y = [&](double us) { return kH - kBottom - (std::log10(us) - y0) / (y1 - y0) * (kH - kTop - kBottom); };
  std::string body = svg::text(kLeft, 30, 16,
                               "start", "allreduce, " + layoutText(q.layout) + ": predicted time",
                               " font-weight=\"bold\" fill=\"#222\"");
  for (double e = y0; e <= y1; ++e) {
    body += svg::line(kLeft, Y(std::pow(10, e)), kW - kRight, Y(std::pow(10, e)), "#ddd");
    body += svg::text(kLeft - 8, Y(std::pow(10, e)) + 4, 11, "end", number("%g", std::pow(10, e)));
  }
  for (int e = static_cast<int>(std::ceil(x0)); e <= x1; e += std::max(1, static_cast<int>((x1 - x0) / 10))) {
    const double b = std::ldexp(1.0, e);
    const char* unit[] = {"", "K", "M", "G", "T"};
    body += svg::line(X(b), kTop, X(b), kH - kBottom, "#eee");
    body += svg::text(X(b), kH - kBottom + 16, 11, "middle",
                      number("%g", std::ldexp(1.0, e % 10)) + unit[std::min(e / 10, 4)]);
  }
  body += svg::text((kLeft + kW - kRight) / 2, kH - 18, 12, "middle", "bytes");
  body += svg::text(20, kTop - 12, 12, "start", "time (us)");
  for (size_t i = 0; i < g.algos.size(); ++i) {
    const std::string colour = kColours[static_cast<int>(g.algos[i])];
    const std::string dash = model::isTernary(g.algos[i]) ? " stroke-width=\"2\"" : " stroke-width=\"1.5\"";
    for (size_t s = 0; s < q.sizes.size(); ++s) {
      const model::Prediction& p = g.preds[s][i];
      if (!p.applies || p.timeUs <= 0) continue;
      body += svg::rect(X(q.sizes[s]) - 2.5, Y(p.timeUs) - 2.5, 5, 5, colour);
      if (s + 1 < q.sizes.size() && g.preds[s + 1][i].applies && g.preds[s + 1][i].timeUs > 0)
        body += svg::line(X(q.sizes[s]), Y(p.timeUs), X(q.sizes[s + 1]), Y(g.preds[s + 1][i].timeUs), colour, dash);
    }
    body += svg::rect(kW - kRight + 16, kTop + 22 * i, 14, 14, colour) +
            svg::text(kW - kRight + 36, kTop + 22 * i + 12, 12, "start", model::algoName(g.algos[i]));
  }
  for (size_t s = 0; s < q.sizes.size(); ++s)  // the choice: a ring around its point
    if (g.choices[s].timeUs > 0)
      body += svg::rect(X(q.sizes[s]) - 6, Y(g.choices[s].timeUs) - 6, 12, 12, "none",
                        " stroke=\"#222\" stroke-width=\"1.5\"");
  const double ly = kTop + 22 * g.algos.size() + 8;
  body += svg::rect(kW - kRight + 16, ly, 14, 14, "none", " stroke=\"#222\" stroke-width=\"1.5\"") +
          svg::text(kW - kRight + 36, ly + 12, 12, "start", "the choice");
  return svg::document(kW, kH, body);
}

}  // namespace tern::planner
