#include "core/group.h"

#include "core/error.h"

namespace tern {

namespace {
thread_local int depth = 0;
thread_local std::vector<GroupWork> pending;

GroupWork& workFor(Comm* c) {
  for (GroupWork& w : pending)
    if (w.comm == c) return w;
  pending.push_back({c, {}, {}});
  return pending.back();
}
}  // namespace

bool groupOpen() { return depth > 0; }
void groupAddCollective(Comm* c, std::function<ternResult_t()> fn) {
  workFor(c).collectives.push_back(std::move(fn));
}
void groupAddP2P(Comm* c, const P2P& p) { workFor(c).p2p.push_back(p); }

ternResult_t runBlocking(const std::vector<GroupWork>& works) {
  auto job = [](const GroupWork& w) {
    Comm* c = w.comm;
    auto colls = w.collectives;
    auto p2p = w.p2p;
    return [c, colls, p2p]() -> ternResult_t {
      for (auto& fn : colls) TERN_CHECK(fn());
      if (!p2p.empty()) TERN_CHECK(sendRecv(*c, p2p));
      c->opsDone.fetch_add(1, std::memory_order_relaxed);
      return ternSuccess;
    };
  };
  auto report = [](Comm* c, ternResult_t r, const std::string& err) {
    if (r != ternSuccess) {
      c->setLastError(err);
      setThreadError(err);
    }
    return r;
  };
  std::string err;
  if (works.size() == 1) {  // one communicator: may run right here
    Comm* c = works[0].comm;
    return report(c, c->engine->runNow(job(works[0]), &err), err);
  }
  // Several communicators progress together, each on its own thread, so a
  // group spanning them cannot deadlock on their mutual dependencies.
  std::vector<std::shared_ptr<Operation>> ops;
  for (const GroupWork& w : works) ops.push_back(w.comm->engine->submit(job(w)));
  ternResult_t first = ternSuccess;
  for (size_t i = 0; i < ops.size(); ++i) {
    ternResult_t r = report(works[i].comm, ops[i]->wait(&err), err);
    if (first == ternSuccess) first = r;
  }
  return first;
}

}  // namespace tern

extern "C" ternResult_t ternGroupStart(void) {
  ++tern::depth;
  return ternSuccess;
}

extern "C" ternResult_t ternGroupEnd(void) {
  using namespace tern;
  if (depth == 0)
    return setError(ternInvalidUsage, "ternGroupEnd without a matching ternGroupStart");
  if (--depth > 0) return ternSuccess;
  std::vector<GroupWork> works;
  works.swap(pending);
  if (works.empty()) return ternSuccess;
  return runBlocking(works);
}
