// Ring broadcast (pipelined): the root streams its buffer to the next rank,
// every rank forwards what arrives while writing it out, the last one only
// writes.  Bandwidth-optimal for large buffers (each link carries it once).
#include "collectives/collectives.h"

namespace tern {

void planBroadcast(const PlanCtx& x, const void* src, void* dst, size_t bytes, int root,
                   Phase* ph) {
  const int n = x.nranks;
  const int pos = (x.pos() - x.posOf(root) + n) % n;
  char* d = static_cast<char*>(dst);
  ph->what = "broadcast";
  if (n == 1) {
    if (src != dst) x.mem->copy(d, src, bytes);
    return;
  }
  ph->progs.resize(1);
  if (pos == 0)
    ph->progs[0].add({nullptr, x.next(), static_cast<const char*>(src), src != dst ? d : nullptr, bytes});
  else
    ph->progs[0].add({x.prev(), pos == n - 1 ? nullptr : x.next(), nullptr, d, bytes});
}

}  // namespace tern
