// Ring reduce (pipelined): the rank after the root starts, every rank adds its
// buffer to what streams through, the root writes the result.  The root
// also sends its descriptor to the first rank, which hears it (below).
//
// Two ranks: the first rank's send and the root's reduction of it are
// direct steps (Step::direct), so where the sender's buffer is host memory
// from ternMemAlloc the root reduces straight out of its mapping: the sender
// copies nothing.  Otherwise a 32-byte header leads the payload, which
// streams as before.
#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

void planReduce(const PlanCtx& x, const void* src, void* dst, size_t count, ternDataType_t dt,
                ternRedOp_t op, int root, Phase* ph) {
  const int n = x.nranks;
  const size_t bytes = count * ternTypeSize(dt);
  const char* s = static_cast<const char*>(src);
  ph->what = "reduce";
  ph->red = {dt, op};
  if (n == 1) {
    if (src != dst) x.mem->copy(dst, src, bytes);
    return;
  }
  const int pos = (x.pos() - x.posOf(root) - 1 + 2 * n) % n;  // 0: first, n-1: root
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  if (pos == 0) {
    Step first{nullptr, x.next(), s, nullptr, bytes};
    first.feedsReduce = true;  // the next rank reduces it: it goes in small bursts
    first.direct = n == 2;
    prog.add(first);
  } else if (pos < n - 1) {
    prog.add({x.prev(), x.next(), s, nullptr, bytes, true});
  } else {
    Step last{x.prev(), nullptr, s, static_cast<char*>(dst), bytes, true, op == ternAvg};
    last.direct = n == 2;
    prog.add(last);
  }
  // The root's descriptor would go unread (it sends nothing), and the first
  // rank reads nothing: as broadcast.cc's, it goes the other way, and the
  // first rank hears it without waiting (this call or its next on the stream).
  if (pos == n - 1) Transfers(ph, false).greet(x.next());
  if (pos == 0) Transfers(ph, false).hear(x.prev(), bytes);
}

}  // namespace tern
