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
