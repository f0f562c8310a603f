#include "engine/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>

#include "base/env.h"
#include "base/log.h"

namespace tern {

namespace {

// Wall-clock microseconds: ranks' files line up when opened together.
int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The k-th communicator a process makes (k > 0) writes FILE...comm<k>.json,
// so a process with several communicators keeps every timeline.
std::string pathFor(const std::string& spec, int rank, int k) {
  size_t at = spec.find("%r");
  std::string p = at == std::string::npos
                      ? spec + ".rank" + std::to_string(rank) + ".json"
                      : spec.substr(0, at) + std::to_string(rank) + spec.substr(at + 2);
  if (k == 0) return p;
  const std::string ext = ".json";
  bool json = p.size() >= ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0;
  if (json) p.resize(p.size() - ext.size());
  return p + ".comm" + std::to_string(k) + (json ? ext : "");
}

uint64_t bytesOf(const Operation& op) {
  return op.desc.count * ternTypeSize(static_cast<ternDataType_t>(op.desc.dtype));
}

}  // namespace

std::unique_ptr<Trace> Trace::fromEnv(int rank, const int classOf[TERN_PRIORITY_LEVELS]) {
  std::string spec = envString("TERN_TRACE", "");
  if (spec.empty()) return nullptr;
  size_t cap = static_cast<size_t>(std::max<long long>(envInt("TERN_TRACE_EVENTS", 100000), 1));
  static std::atomic<int> made{0};
  return std::unique_ptr<Trace>(new Trace(pathFor(spec, rank, made++), rank, classOf, cap));
}

Trace::Trace(std::string path, int rank, const int classOf[TERN_PRIORITY_LEVELS], size_t cap)
    : path_(std::move(path)), rank_(rank), cap_(cap) {
  std::copy(classOf, classOf + TERN_PRIORITY_LEVELS, classOf_);
  done_.reserve(std::min<size_t>(cap_, 4096));
}

void Trace::issued(const Operation& op) {
  std::lock_guard<std::mutex> lk(mu_);
  open_[&op] = {nowUs(), 0};
}

void Trace::started(const Operation& op) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = open_.find(&op);
  if (it != open_.end()) it->second.second = nowUs();
}

void Trace::completed(const Operation& op) {
  int64_t end = nowUs();
  std::lock_guard<std::mutex> lk(mu_);
  auto it = open_.find(&op);
  if (it == open_.end()) return;
  int64_t issue = it->second.first, start = it->second.second ? it->second.second : end;
  open_.erase(it);
  if (done_.size() >= cap_) {
    ++dropped_;
    return;
  }
  // peer: p2p's other rank (desc.root), -1 for collectives without a root.
  done_.push_back(Event{opKind(op.desc.kind).name, bytesOf(op), op.desc.seq, op.level,
                        op.desc.root, static_cast<int>(op.result), issue, start, end});
}

// One operation as a complete ("X") event on its level's track, from start
// to end; args carry everything, the issue time included.
void Trace::writeEvent(FILE* f, const Event& e) const {
  fprintf(f,
          ",\n{\"name\":\"%s L%d\",\"cat\":\"class%d\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
          "\"ts\":%lld,\"dur\":%lld,\"args\":{\"kind\":\"%s\",\"bytes\":%llu,\"level\":%d,"
          "\"flow_class\":%d,\"peer\":%d,\"seq\":%llu,\"issue_us\":%lld,\"start_us\":%lld,"
          "\"end_us\":%lld,\"result\":%d}}",
          e.kind, e.level, classOf_[e.level], rank_, e.level,
          static_cast<long long>(e.startUs), static_cast<long long>(e.endUs - e.startUs), e.kind,
          static_cast<unsigned long long>(e.bytes), e.level, classOf_[e.level], e.peer,
          static_cast<unsigned long long>(e.seq), static_cast<long long>(e.issueUs),
          static_cast<long long>(e.startUs), static_cast<long long>(e.endUs), e.result);
}

bool Trace::write() {
  std::lock_guard<std::mutex> lk(mu_);
  FILE* f = fopen(path_.c_str(), "w");
  if (!f) {
    TERN_LOG(Warn, "TERN_TRACE: cannot write %s", path_.c_str());
    return false;
  }
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"dropped\":%llu},"
             "\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
             "\"args\":{\"name\":\"tern rank %d\"}}",
          rank_, static_cast<unsigned long long>(dropped_), rank_, rank_);
  for (int l = 0; l < TERN_PRIORITY_LEVELS; ++l)
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
               "\"args\":{\"name\":\"level %d (flow class %d)\"}}",
            rank_, l, l, classOf_[l]);
  for (const Event& e : done_) writeEvent(f, e);
  fprintf(f, "\n]}\n");
  bool ok = fclose(f) == 0;
  if (dropped_) TERN_LOG(Warn, "TERN_TRACE: %llu operations past TERN_TRACE_EVENTS were not kept",
                         static_cast<unsigned long long>(dropped_));
  TERN_LOG(Info, "TERN_TRACE: %zu operations written to %s", done_.size(), path_.c_str());
  return ok;
}

}  // namespace tern
