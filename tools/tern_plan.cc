// tern-plan: the planners on the command line (docs/DESIGN.md).
//
//   tern-plan schedule model.json [--gantt out.svg|out.png] [--network-now GBPS] [--microbatches M]
//   tern-plan priorities graph.json [--policy tic|tac]
//   tern-plan collectives --hosts H --ranks-per-host L[,L1,...] --net RATE[:LATENCY] --sizes LIST
//                         [--ternary] [--link tcp|ucx] [--model FILE] [--json] [--png OUT.png|OUT.svg]
//                         [--max-bits W]   (the widest ternary code that may run: the codec's 10)
//   tern-plan fit measurements.json [--model START.json] [--out MODEL.json]
//   tern-plan calibrate --hosts H (--ranks N | --ranks-per-host L[,L1,...]) [--link tcp|ucx] [--ternary]
//                       [--model START.json] [--out MODEL.json] [--measurements OUT.json] -- BENCHMARK...
//
// collectives and fit read the model file TERN_MODEL_FILE names when --model is not given.
//
// The result JSON goes to stdout.  Exit status: 0 done; 2 an unusable input
// or command line (one sentence on stderr naming the field or flag); 1 any
// other failure (no split fits memory, the gantt could not be written).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gantt_script.h"
#include "planner/tern_plan.h"

extern char** environ;

namespace {

constexpr int kInputError = 2, kFailure = 1;

const char kUsage[] =
    "usage: tern-plan schedule MODEL.json [--gantt OUT.svg|OUT.png] [--network-now GBPS] [--microbatches M]\n"
    "       tern-plan priorities GRAPH.json [--policy tic|tac]\n"
    "       tern-plan collectives --hosts H --ranks-per-host L[,L1,...] --net RATE[:LATENCY] --sizes LIST\n"
    "                             [--ternary] [--link tcp|ucx] [--model FILE] [--json] [--png OUT.png|OUT.svg]\n"
    "                             [--max-bits W]\n"
    "       tern-plan fit MEASUREMENTS.json [--model START.json] [--out MODEL.json]\n"
    "       tern-plan calibrate --hosts H (--ranks N | --ranks-per-host L[,L1,...]) [--link tcp|ucx] [--ternary]\n"
    "                           [--model START.json] [--out MODEL.json] [--measurements OUT.json] -- BENCHMARK...\n";

struct Exit {
  int code;
  std::string message;
};

struct Args {
  std::string command, file;
  std::map<std::string, std::string> flags;
  std::vector<std::string> rest;  // after "--": calibrate's benchmark command
};

// What each command takes: a file first or not, flags with a value, switches.
struct Command {
  const char* name;
  bool file;
  std::vector<std::string> valued, switches;
};
const Command kCommands[] = {
    {"schedule", true, {"--gantt", "--network-now", "--microbatches"}, {}},
    {"priorities", true, {"--policy"}, {}},
    {"collectives", false,
     {"--hosts", "--ranks-per-host", "--net", "--sizes", "--link", "--model", "--png", "--max-bits"},
     {"--ternary", "--json"}},
    {"fit", true, {"--model", "--out"}, {}},
    {"calibrate", false, {"--hosts", "--ranks", "--ranks-per-host", "--link", "--model", "--out", "--measurements"},
     {"--ternary"}},
};

bool has(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// The command, its file and its flags (a switch's value is "1").
Args parseArgs(int argc, char** argv) {
  if (argc < 2) throw Exit{kInputError, ""};
  Args a{argv[1], "", {}, {}};
  const Command* cmd = nullptr;
  for (const Command& c : kCommands)
    if (a.command == c.name) cmd = &c;
  if (!cmd)
    throw Exit{kInputError,
               "unknown command \"" + a.command + "\" (schedule, priorities, collectives, fit or calibrate)."};
  int i = 2;
  if (cmd->file) {
    if (argc < 3) throw Exit{kInputError, ""};
    a.file = argv[i++];
  }
  for (; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--" && a.command == "calibrate") {
      a.rest.assign(argv + i + 1, argv + argc);
      break;
    }
    if (has(cmd->switches, flag)) {
      a.flags[flag] = "1";
      continue;
    }
    if (!has(cmd->valued, flag)) throw Exit{kInputError, "tern-plan " + a.command + " takes no option " + flag + "."};
    if (i + 1 >= argc) throw Exit{kInputError, flag + " needs a value."};
    a.flags[flag] = argv[++i];
  }
  return a;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Exit{kInputError, "cannot read " + path + ": " + std::strerror(errno) + "."};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A flag's positive number (an integer where `integer`), or `fallback` without the flag.
double number(const Args& a, const std::string& flag, double fallback, bool integer) {
  auto it = a.flags.find(flag);
  if (it == a.flags.end()) return fallback;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end || !(v > 0) || (integer && v != static_cast<long long>(v)))
    throw Exit{kInputError, flag + " must be a positive " + (integer ? "integer" : "number") + ", not \"" +
                                it->second + "\"."};
  return v;
}

// Calls one function of the C ABI; a failure becomes an Exit with its sentence.
template <typename F>
std::string call(const std::string& file, F f) {
  char* out = nullptr;
  int rc = f(&out);
  std::string text = out ? out : "the planner returned nothing.";
  ternPlanFree(out);
  if (rc != 0) throw Exit{rc == 2 ? kInputError : kFailure, file.empty() ? text : file + ": " + text};
  return text;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Starts argv (envp: its environment) with one end of a new pipe as its file
// descriptor `childFd` (0: we write to it; 1: we read what it prints);
// *ours gets the other end.  Returns posix_spawnp's error (0: it started).
int spawnWithPipe(char* const* argv, char* const* envp, int childFd, pid_t* pid, int* ours) {
  int fds[2];
  if (pipe(fds) != 0) throw Exit{kFailure, std::string("cannot make a pipe: ") + std::strerror(errno) + "."};
  const int theirs = childFd == 0 ? fds[0] : fds[1];
  *ours = childFd == 0 ? fds[1] : fds[0];
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs, childFd);
  posix_spawn_file_actions_addclose(&actions, *ours);
  const int err = posix_spawnp(pid, argv[0], &actions, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  close(theirs);
  if (err != 0) close(*ours);
  return err;
}

// python3 (TERN_PYTHON, else Debian's /usr/bin/python3, else PATH's) runs
// the compiled-in src/planner/svg_to_png.py with the SVG chart on its stdin.
void drawPng(const std::string& svg, const std::string& path, const char* what) {
  const char* python = std::getenv("TERN_PYTHON");
  if (!python) python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const char* argv[] = {python, "-c", kGanttScript, path.c_str(), nullptr};
  pid_t pid;
  int in;
  const int err = spawnWithPipe(const_cast<char* const*>(argv), environ, 0, &pid, &in);
  if (err != 0) {
    throw Exit{kFailure, std::string("cannot run ") + python + " for the PNG " + what + ": " + std::strerror(err) +
                             " (an .svg " + what + " needs no Python)."};
  }
  for (size_t off = 0; off < svg.size();) {  // a dead child closes the pipe: stop writing
    ssize_t n = write(in, svg.data() + off, svg.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(in);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Exit{kFailure, "the PNG " + std::string(what) + " " + path + " was not written (" + python +
                             " failed; see above)."};
}

void writeText(const std::string& text, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  if (!(f << text) || !f.flush()) throw Exit{kFailure, "cannot write " + path + ": " + std::strerror(errno) + "."};
}

void writeGantt(const std::string& model, double bandwidth, long long m, const std::string& path) {
  const bool png = endsWith(path, ".png");
  if (!png && !endsWith(path, ".svg")) throw Exit{kInputError, "--gantt must name an .svg or .png file."};
  const std::string picture = call("the gantt", [&](char** out) {
    return ternPlanGantt(model.c_str(), bandwidth, m, 0, 1, out);  // the SVG, also what a PNG paints
  });
  if (png) return drawPng(picture, path, "gantt");
  writeText(picture, path);
}

int schedule(const Args& a) {
  const std::string model = readFile(a.file);
  const double bandwidth = number(a, "--network-now", 0, false);
  const long long m = static_cast<long long>(number(a, "--microbatches", 0, true));
  const std::string result =
      call(a.file, [&](char** out) { return ternPlanSchedule(model.c_str(), bandwidth, m, out); });
  std::fputs(result.c_str(), stdout);
  if (result.rfind("{\"best\": null", 0) == 0)
    throw Exit{kFailure, a.file + ": no split of the batch fits every stage's memory, even with K = 1."};
  if (a.flags.count("--gantt")) writeGantt(model, bandwidth, m, a.flags.at("--gantt"));
  return 0;
}

int priorities(const Args& a) {
  const std::string graph = readFile(a.file);
  auto it = a.flags.find("--policy");
  const std::string policy = it == a.flags.end() ? "tac" : it->second;
  std::fputs(call(a.file, [&](char** out) { return ternPlanPriorities(graph.c_str(), policy.c_str(), out); }).c_str(),
             stdout);
  // What the order buys, on stderr so stdout stays docs/DESIGN.md's JSON.
  const std::string e = call(a.file, [&](char** out) {
    return ternPlanEfficiency(graph.c_str(), policy.c_str(), 32, 1, out);
  });
  std::fprintf(stderr, "scheduling efficiency: %s", e.c_str());
  return 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

// A number with an optional unit from `units` (name -> factor); `what` names it in errors.
double withUnit(const std::string& text, const std::map<std::string, double>& units, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? end : "";
  auto it = units.find(unit);
  if (end == text.c_str() || it == units.end() || !std::isfinite(v) || v < 0)
    throw Exit{kInputError, what + " \"" + text + "\" is not a number with a known unit."};
  return v * it->second;
}

// --sizes: bytes with K, M, G (powers of 1024), comma-separated; LO..HI is every doubling from LO to HI.
std::vector<double> sizesOf(const std::string& list) {
  const std::map<std::string, double> units = {{"", 1}, {"K", 1024}, {"M", 1 << 20}, {"G", 1 << 30}};
  std::vector<double> out;
  for (const std::string& item : split(list, ',')) {
    const size_t dots = item.find("..");
    const double lo = withUnit(item.substr(0, dots), units, "--sizes' size");
    const double hi = dots == std::string::npos ? lo : withUnit(item.substr(dots + 2), units, "--sizes' size");
    if (!(lo >= 1) || hi < lo || lo != std::floor(lo) || hi != std::floor(hi))
      throw Exit{kInputError, "--sizes' \"" + item + "\" must be whole bytes, at least 1 (LO..HI with LO <= HI)."};
    for (double b = lo; b <= hi; b *= 2) out.push_back(b);
  }
  if (out.empty()) throw Exit{kInputError, "--sizes must list at least one size."};
  return out;
}

std::string whole(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string numbersJson(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + whole(v[i]);
  return out + "]";
}

// --model, else TERN_MODEL_FILE, else nullptr (the defaults).
const char* modelPath(const Args& a) {
  auto it = a.flags.find("--model");
  if (it != a.flags.end()) return it->second.c_str();
  const char* env = std::getenv("TERN_MODEL_FILE");
  return env && *env ? env : nullptr;
}

// The query ternPlanCollectives reads, from the command line.
std::string collectivesQuery(const Args& a) {
  auto need = [&](const std::string& flag) {
    if (!a.flags.count(flag)) throw Exit{kInputError, "tern-plan collectives needs " + flag + "."};
    return a.flags.at(flag);
  };
  std::vector<double> perHost;
  for (const std::string& l : split(need("--ranks-per-host"), ','))
    perHost.push_back(number(Args{"", "", {{"--ranks-per-host", l}}, {}}, "--ranks-per-host", 0, true));
  const double hosts = number(a, "--hosts", perHost.size() > 1 ? perHost.size() : 0, true);
  if (hosts == 0) need("--hosts");
  // ranks_per_host: one number for every host, or a list (one per host).
  std::string q = "{\"hosts\": " + whole(hosts) + ", \"ranks_per_host\": " +
                  (perHost.size() == 1 ? whole(perHost[0]) : numbersJson(perHost)) +
                  ", \"sizes\": " + numbersJson(sizesOf(need("--sizes")));
  if (a.flags.count("--net")) {
    const std::vector<std::string> parts = split(a.flags.at("--net"), ':');
    if (parts.empty() || parts.size() > 2) throw Exit{kInputError, "--net is RATE[:LATENCY], e.g. 10gbit:20us."};
    const double gbps = withUnit(parts[0], {{"", 1}, {"gbit", 1}, {"mbit", 1e-3}}, "--net's rate");
    if (!(gbps > 0)) throw Exit{kInputError, "--net's rate must be positive."};
    char buf[64];
    std::snprintf(buf, sizeof buf, ", \"gbps\": %.17g", gbps);
    q += buf;
    if (parts.size() == 2) {
      std::snprintf(buf, sizeof buf, ", \"latency_us\": %.17g",
                    withUnit(parts[1], {{"", 1}, {"us", 1}, {"ms", 1e3}}, "--net's latency"));
      q += buf;
    }
  } else if (!modelPath(a)) {
    need("--net");  // without a model file the network's rate must be said
  }
  if (a.flags.count("--link")) q += ", \"link\": \"" + a.flags.at("--link") + "\"";
  if (a.flags.count("--ternary")) q += ", \"ternary\": true";
  if (a.flags.count("--max-bits")) q += ", \"max_bits\": " + whole(number(a, "--max-bits", 0, true));
  return q + "}";
}

int collectives(const Args& a) {
  const std::string query = collectivesQuery(a);
  const char* model = modelPath(a);
  const bool json = a.flags.count("--json");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string result = call("", [&](char** out) {
    return ternPlanCollectives(query.c_str(), model, json ? 0 : 1, out);
  });
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fputs(result.c_str(), stdout);
  if (!json) std::printf("# predicted and tabled in %.1f ms\n", ms);
  if (a.flags.count("--png")) {
    const std::string& path = a.flags.at("--png");
    const bool png = endsWith(path, ".png");
    if (!png && !endsWith(path, ".svg")) throw Exit{kInputError, "--png must name a .png or .svg file."};
    const std::string chart = call("the chart", [&](char** out) { return ternPlanCollectives(query.c_str(), model, 2, out); });
    if (png) drawPng(chart, path, "chart");
    else writeText(chart, path);
  }
  return 0;
}

int fit(const Args& a) {
  const std::string measurements = readFile(a.file);
  const std::string model =
      call(a.file, [&](char** out) { return ternPlanFitModel(measurements.c_str(), modelPath(a), out); });
  if (a.flags.count("--out")) writeText(model, a.flags.at("--out"));
  else std::fputs(model.c_str(), stdout);
  return 0;
}

// Runs `argv` with `env` over this process's environment and returns its
// stdout (its stderr goes to ours).
std::string runCapture(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (!env.count(v.substr(0, v.find('=')))) vars.push_back(v);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& v : vars) cenv.push_back(const_cast<char*>(v.c_str()));
  cargv.push_back(nullptr);
  cenv.push_back(nullptr);
  pid_t pid;
  int from;
  const int err = spawnWithPipe(cargv.data(), cenv.data(), 1, &pid, &from);
  if (err != 0) throw Exit{kFailure, "cannot run " + argv[0] + ": " + std::strerror(err) + "."};
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(from, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(from);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Exit{kFailure, "the benchmark " + argv[0] + " failed (status " + std::to_string(WEXITSTATUS(status)) + ")."};
  return out;
}

// (bytes, time_us) of every row of an nccl-tests-style table (build/perf's
// *_perf, lines maybe prefixed "[rank] " by ternrun): size, count, type,
// redop, root, then time, algbw, busbw, #wrong out of place and the same in
// place.  Both times are kept: two timings of one call.
std::vector<std::pair<double, double>> benchmarkRows(const std::string& out) {
  std::vector<std::pair<double, double>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream words(line);
    for (std::string w; words >> w;) f.push_back(w);
    if (!f.empty() && f[0].front() == '[') f.erase(f.begin());
    if (f.size() < 6 || f[0].find_first_not_of("0123456789") != std::string::npos) continue;
    for (size_t t : {size_t(5), size_t(9)})
      if (t < f.size() && std::strtod(f[t].c_str(), nullptr) > 0)
        rows.push_back({std::strtod(f[0].c_str(), nullptr), std::strtod(f[t].c_str(), nullptr)});
  }
  return rows;
}

// Times every algorithm that can be forced (TERN_ALGO; TERN_SMALL_THRESHOLD=0
// so that it holds at every size) with the benchmark the command runs on the
// job's ranks, and fits the model to the timings: the small path below
// TERN_SMALL_THRESHOLD (32 KiB), two-level only across hosts, the ternary
// allreduce (-T 1) from TERN_TERNARY_MIN_BYTES (64 KiB).
int calibrate(const Args& a) {
  if (a.rest.empty()) throw Exit{kInputError, "tern-plan calibrate needs the benchmark's command after --."};
  const long long hosts = static_cast<long long>(number(a, "--hosts", 0, true));
  if (hosts == 0) throw Exit{kInputError, "tern-plan calibrate needs --hosts."};
  std::string layout;
  bool evenSeveral = false;  // every host has as many ranks, more than one: the two-level ternary form runs
  if (a.flags.count("--ranks-per-host")) {
    std::vector<double> per;
    for (const std::string& l : split(a.flags.at("--ranks-per-host"), ','))
      per.push_back(number(Args{"", "", {{"--ranks-per-host", l}}, {}}, "--ranks-per-host", 0, true));
    if (per.size() == 1) per.assign(hosts, per[0]);
    if (static_cast<long long>(per.size()) != hosts)
      throw Exit{kInputError, "--ranks-per-host lists " + std::to_string(per.size()) + " hosts, not " +
                                  std::to_string(hosts) + "."};
    layout = "\"ranks_per_host\": " + numbersJson(per);
    evenSeveral = per[0] > 1 && std::all_of(per.begin(), per.end(), [&](double l) { return l == per[0]; });
  } else {
    const double ranks = number(a, "--ranks", 0, true);
    if (ranks == 0) throw Exit{kInputError, "tern-plan calibrate needs --ranks or --ranks-per-host."};
    layout = "\"ranks\": " + whole(ranks);
    evenSeveral = static_cast<long long>(ranks) % hosts == 0 && ranks / hosts > 1;
  }
  const std::string link = hosts == 1 ? "shm" : a.flags.count("--link") ? a.flags.at("--link") : "tcp";
  struct Run {
    const char* algo;
    std::map<std::string, std::string> env;
    bool ternary;
    double lo, hi;  // the sizes it measures
  };
  std::vector<Run> runs = {{"small", {{"TERN_ALGO", "rd"}, {"TERN_SMALL_PATH", "1"}}, false, 0, 32768},
                           {"rd", {{"TERN_ALGO", "rd"}, {"TERN_SMALL_THRESHOLD", "0"}}, false, 0, 1e300},
                           {"ring", {{"TERN_ALGO", "ring"}, {"TERN_SMALL_THRESHOLD", "0"}}, false, 0, 1e300}};
  if (hosts > 1) runs.push_back({"twolevel", {{"TERN_ALGO", "twolevel"}, {"TERN_SMALL_THRESHOLD", "0"}}, false, 0, 1e300});
  if (a.flags.count("--ternary")) {  // the flat form forced (auto takes two levels where it can)
    runs.push_back({"ternary", {{"TERN_ALGO", "ring"}}, true, 65536, 1e300});
    if (hosts > 1 && evenSeveral) runs.push_back({"ternary-twolevel", {{"TERN_ALGO", "twolevel"}}, true, 65536, 1e300});
  }
  std::string ms = "{\"measurements\": [";
  size_t count = 0;
  for (const Run& r : runs) {
    std::vector<std::string> argv = a.rest;
    if (r.ternary) argv.insert(argv.end(), {"-T", "1"});
    std::fprintf(stderr, "# calibrate: %s\n", r.algo);
    for (const auto& [bytes, us] : benchmarkRows(runCapture(argv, r.env))) {
      if (bytes < r.lo || bytes > r.hi) continue;
      ms += std::string(count++ ? ",\n  " : "\n  ") + "{\"algorithm\": \"" + r.algo + "\", \"link\": \"" + link +
            "\", \"hosts\": " + std::to_string(hosts) + ", " + layout + ", \"bytes\": " + whole(bytes) +
            ", \"time_us\": " + std::to_string(us) + "}";
    }
  }
  ms += "]}\n";
  if (count == 0) throw Exit{kFailure, "the benchmark printed no rows of timings (an nccl-tests-style table)."};
  if (a.flags.count("--measurements")) writeText(ms, a.flags.at("--measurements"));
  const std::string model =
      call("the calibration", [&](char** out) { return ternPlanFitModel(ms.c_str(), modelPath(a), out); });
  if (a.flags.count("--out")) writeText(model, a.flags.at("--out"));
  else std::fputs(model.c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parseArgs(argc, argv);
    if (a.command == "collectives") return collectives(a);
    if (a.command == "fit") return fit(a);
    if (a.command == "calibrate") return calibrate(a);
    return a.command == "schedule" ? schedule(a) : priorities(a);
  } catch (const Exit& e) {
    std::fprintf(stderr, "%s", e.message.empty() ? kUsage : ("tern-plan: " + e.message + "\n").c_str());
    return e.code;
  }
}
