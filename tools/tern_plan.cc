// tern-plan: the planners on the command line (docs/DESIGN.md).
//
//   tern-plan schedule model.json [--gantt out.svg|out.png] [--network-now GBPS] [--microbatches M]
//   tern-plan priorities graph.json [--policy tic|tac]
//
// The result JSON goes to stdout.  Exit status: 0 done; 2 an unusable input
// or command line (one sentence on stderr naming the field or flag); 1 any
// other failure (no split fits memory, the gantt could not be written).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
    "       tern-plan priorities GRAPH.json [--policy tic|tac]\n";

struct Exit {
  int code;
  std::string message;
};

struct Args {
  std::string command, file;
  std::map<std::string, std::string> flags;
};

// The command, its file and --flag value pairs (only those `allowed`).
Args parseArgs(int argc, char** argv) {
  if (argc < 3) throw Exit{kInputError, ""};
  Args a{argv[1], argv[2], {}};
  const std::vector<std::string> allowed = a.command == "schedule"
                                               ? std::vector<std::string>{"--gantt", "--network-now", "--microbatches"}
                                               : std::vector<std::string>{"--policy"};
  if (a.command != "schedule" && a.command != "priorities")
    throw Exit{kInputError, "unknown command \"" + a.command + "\" (schedule or priorities)."};
  for (int i = 3; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (std::find(allowed.begin(), allowed.end(), flag) == allowed.end())
      throw Exit{kInputError, "tern-plan " + a.command + " takes no option " + flag + "."};
    if (i + 1 >= argc) throw Exit{kInputError, flag + " needs a value."};
    a.flags[flag] = argv[i + 1];
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
  if (rc != 0) throw Exit{rc == 2 ? kInputError : kFailure, file + ": " + text};
  return text;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// python3 (TERN_PYTHON, else Debian's /usr/bin/python3, else PATH's) runs
// the compiled-in src/planner/svg_to_png.py with the SVG chart on its stdin.
void drawPng(const std::string& svg, const std::string& path) {
  const char* python = std::getenv("TERN_PYTHON");
  if (!python) python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  int fds[2];
  if (pipe(fds) != 0) throw Exit{kFailure, std::string("cannot make a pipe: ") + std::strerror(errno) + "."};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  const char* argv[] = {python, "-c", kGanttScript, path.c_str(), nullptr};
  pid_t pid;
  int err = posix_spawnp(&pid, python, &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[0]);
  if (err != 0) {
    close(fds[1]);
    throw Exit{kFailure, std::string("cannot run ") + python + " for the PNG gantt: " + std::strerror(err) +
                             " (an .svg gantt needs no Python)."};
  }
  for (size_t off = 0; off < svg.size();) {  // a dead child closes the pipe: stop writing
    ssize_t n = write(fds[1], svg.data() + off, svg.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Exit{kFailure, "the PNG gantt " + path + " was not written (" + python + " failed; see above)."};
}

void writeGantt(const std::string& model, double bandwidth, long long m, const std::string& path) {
  const bool png = endsWith(path, ".png");
  if (!png && !endsWith(path, ".svg")) throw Exit{kInputError, "--gantt must name an .svg or .png file."};
  const std::string picture = call("the gantt", [&](char** out) {
    return ternPlanGantt(model.c_str(), bandwidth, m, 0, 1, out);  // the SVG, also what a PNG paints
  });
  if (png) return drawPng(picture, path);
  std::ofstream f(path, std::ios::binary);
  if (!(f << picture) || !f.flush()) throw Exit{kFailure, "cannot write " + path + ": " + std::strerror(errno) + "."};
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

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parseArgs(argc, argv);
    return a.command == "schedule" ? schedule(a) : priorities(a);
  } catch (const Exit& e) {
    std::fprintf(stderr, "%s", e.message.empty() ? kUsage : ("tern-plan: " + e.message + "\n").c_str());
    return e.code;
  }
}
