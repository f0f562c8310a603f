// Ring broadcast (pipelined): the root streams its buffer to the next rank,
// every rank forwards what arrives while writing it out, the last one only
// writes.  Bandwidth-optimal for large buffers (each link carries it once).
//
// The ring leaves the last rank's descriptor unread (it sends nothing) and
// the root reads nothing: ranks that disagree on the root would both only
// send, and nobody would notice before the next call read the other's
// bytes.  So the last rank also sends its descriptor on to the root, and
// the root reads it, each in a program of its own that runs beside the
// transfer (not after it: the root then waits for a descriptor that left
// when the last rank began, about one way, not a round trip at the end).
//
// Two ranks: the transfer is a plain one between the callers' buffers, so
// over a connection that offers it it goes single copy (Step::direct): the
// receiver reads the root's buffer, and the root's send is done once it has
// (two ranks that both think they are the root still fail at once: each
// reads the other's descriptor).  The root's own copy (out of place) is a
// program of its own, made while the receiver reads.
#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

void planBroadcast(const PlanCtx& x, const void* src, void* dst, size_t bytes, int root,
                   Phase* ph) {
  const int n = x.nranks;
  const int pos = (x.pos() - x.posOf(root) + n) % n;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "broadcast";
  if (n == 1) {
    if (src != dst) x.mem->copy(d, src, bytes);
    return;
  }
  if (n == 2) {  // one hop: plain transfers (see above)
    Transfers t(ph, false);
    if (pos == 0) {
      t.send(x.next(), s, bytes);
      t.local(s, d, bytes);
      t.recv(x.prev(), nullptr, 0);  // the receiver's descriptor
    } else {
      t.recv(x.prev(), d, bytes);
      t.send(x.next(), nullptr, 0);
    }
    return;
  }
  ph->progs.resize(1);
  if (pos == 0)
    ph->progs[0].add({nullptr, x.next(), s, src != dst ? d : nullptr, bytes});
  else
    ph->progs[0].add({x.prev(), pos == n - 1 ? nullptr : x.next(), nullptr, d, bytes});
  if (pos == 0) Transfers(ph, false).recv(x.prev(), nullptr, 0);    // the last rank's descriptor
  if (pos == n - 1) Transfers(ph, false).send(x.next(), nullptr, 0);
}

}  // namespace tern
