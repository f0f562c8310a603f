// What holds a waiting phase up: gone peers, the other stream's descriptor, the peers named (phase_blockers.h).
#include "engine/phase_blockers.h"

#include <algorithm>
#include <set>

#include "base/dtype.h"
#include "base/error.h"
#include "engine/descriptors.h"
#include "engine/operation.h"
#include "engine/stream_marks.h"

namespace tern {

ternResult_t checkBlockedOnGone(const Phase& ph, int rank, const char* what) {
  for (const Program& p : ph.progs) {
    if (p.done()) continue;
    const Step& s = p.steps[p.cur];
    const char* ip;
    size_t unit = s.codec ? s.inUnit : s.reduce ? typeSize(reductionOf(ph, p).dt) : 1;
    bool starved = s.in && s.in->inputEnded() && s.in->recvAvail(&ip) < std::max<size_t>(unit, 1);
    Conn* dead = starved ? s.in : (s.out && s.out->peerGone()) ? s.out : nullptr;
    if (dead)
      return setError(ternRemoteError, "rank " + std::to_string(rank) + " needs rank " +
                                           std::to_string(dead->peer) + " in " + what +
                                           ", but that rank exited or failed");
  }
  return ternSuccess;
}

// A peer whose operation took the other stream of the pair (a connection
// and its small sibling, Conn::small) disagrees on the operation's size:
// its descriptor waits at the head of that stream while we wait for ours.
// Every earlier operation that read either stream has completed (issue
// order), so a descriptor there is the peer's next operation, unless ours
// came meanwhile: the peer may have sent ours and then its next one on the
// other stream between our last look at ours and this check (a 4-rank
// send/recv ring reported a false mismatch in about 1 run in 60 under
// AddressSanitizer, four runs at once).  The peer publishes them in that
// order, so once its next descriptor is seen here, ours shows too if it was
// sent: our stream is looked at again after the other.
ternResult_t checkOtherStream(const Operation& op, const Phase& ph) {
  for (const Program& p : ph.progs) {
    if (p.done() || !p.started) continue;
    Conn* in = p.steps[p.cur].in;
    if (!in || p.in.desc == 0) continue;  // not waiting for a descriptor
    Conn* other = in->owner ? in->owner : in->small(0);
    OpDesc d;
    if (!other || beingRead(other) || !peekDesc(other, &d) || opKind(d.kind).interleaved) continue;
    const char* ours;
    if (in->recvAvail(&ours) > 0) continue;  // the peer's next bytes here: the engine reads them
    std::string why = descMismatch(op.desc, d);
    if (why.empty())
      why = "rank " + std::to_string(d.rank) + " sent its " + describe(d) + " over " + other->name() +
            " but rank " + std::to_string(op.desc.rank) + " expects it over " + in->name() +
            ": the ranks disagree on TERN_LL_BYTES; set it the same everywhere";
    return setError(ternInvalidUsage, why);
  }
  return ternSuccess;
}

std::string blockedPeers(const Phase& ph) {
  std::set<int> peers;
  for (const Program& p : ph.progs) {
    if (p.done()) continue;
    const Step& s = p.steps[p.cur];
    if (s.in) peers.insert(s.in->peer);
    if (s.out) peers.insert(s.out->peer);
  }
  std::string out;
  for (int r : peers) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "-" : out;
}

}  // namespace tern
