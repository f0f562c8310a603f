// Ring broadcast (pipelined): the root streams its buffer to the next rank,
// every rank forwards what arrives while writing it out, the last one only
// writes.  Bandwidth-optimal for large buffers (each link carries it once).
#include "collectives/collectives.h"

namespace tern {

namespace {

// Two ranks: the transfer is a plain one between the callers' buffers, so
// over a connection that offers it it goes single copy (Step::direct): the
// receiver reads the root's buffer, and the root's send is done once it
// has.  The root's own copy (out of place) is a program of its own, made
// while the receiver reads.  The descriptors the end-of-call greeting would
// exchange (tasks.cc) go the other way at once, in programs of their own
// (zero-byte steps): two ranks that both think they are the root each read
// the other's and fail at once, where two direct sends would each wait for
// a reader until the timeout; and the root waits for a descriptor that left
// when the receiver began, not for one sent after it finished.
void planBroadcastPair(const PlanCtx& x, const void* src, char* d, size_t bytes, bool root, Phase* ph) {
  const char* s = static_cast<const char*>(src);
  Conn* peer = root ? x.next() : x.prev();
  ph->progs.resize(root && src != d ? 3 : 2);
  Step back;  // the descriptor alone
  if (root) {
    ph->progs[0].addTransfer(nullptr, peer, s, nullptr, bytes);
    back.in = peer;
    if (src != d) ph->progs[2].add({nullptr, nullptr, s, d, bytes});
  } else {
    ph->progs[0].addTransfer(peer, nullptr, nullptr, d, bytes);
    back.out = peer;
  }
  ph->progs[1].steps.push_back(back);
}

}  // namespace

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
  if (n == 2) return planBroadcastPair(x, src, d, bytes, pos == 0, ph);
  ph->progs.resize(1);
  if (pos == 0)
    ph->progs[0].add({nullptr, x.next(), static_cast<const char*>(src), src != dst ? d : nullptr, bytes});
  else
    ph->progs[0].add({x.prev(), pos == n - 1 ? nullptr : x.next(), nullptr, d, bytes});
}

}  // namespace tern
