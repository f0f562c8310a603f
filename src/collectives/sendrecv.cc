// Point-to-point.  A group's transfers become one program per (peer,
// direction), all driven together by runPrograms: a rank that sends to and
// receives from the same peer makes progress on both, in any order, so
// matched pairs never deadlock.  Transfers to one peer stay in call order.
#include <map>

#include "collectives/collectives.h"
#include "collectives/primitives.h"

namespace tern {

ternResult_t sendRecv(Comm& c, const std::vector<P2P>& ops) {
  std::map<std::pair<int, bool>, size_t> index;
  std::vector<Program> progs;
  for (const P2P& p : ops) {
    auto key = std::make_pair(p.peer, p.send);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, progs.size()).first;
      progs.emplace_back();
    }
    Conn* conn = c.conns[p.peer].get();
    if (p.send)
      progs[it->second].add({nullptr, conn, p.buf, nullptr, p.bytes});
    else
      progs[it->second].add({conn, nullptr, nullptr, p.buf, p.bytes});
  }
  return runPrograms(c, progs, {}, "send/recv");
}

}  // namespace tern
