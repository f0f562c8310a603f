// Ring broadcast (pipelined): the root streams its buffer to the next rank,
// every rank forwards what arrives while writing it out, the last one only
// writes.  Bandwidth-optimal for large buffers (each link carries it once).
//
// The ring leaves the last rank's descriptor unread (it sends nothing) and
// the root reads nothing: ranks that disagree on the root would both only
// send.  So the last rank also sends its descriptor on to the root (greet),
// and the root hears it (Transfers::hear): checked if it comes while the
// root's sends go out, else owed by the stream and checked by the root's
// next call on it (or its ternCommDestroy).  The root returns once its data
// is out, as an MPI root's eager send does: waiting for that descriptor made
// every small broadcast a round trip (0.16x OpenMPI's rate at 8 bytes,
// perf/RESULTS.md, 2026-11-28: the small path, small blocking collectives
// without engine rounds).

// Two ranks: the transfer is a plain one between the callers' buffers, so
// over a connection that offers it it goes single copy (Step::direct): the
// receiver reads the root's buffer, and the root's send is done once it has
// (two ranks that both think they are the root still fail at once: each
// hears the other's data while it waits to be read).  Out of place, while
// the buffer fits the fifo, the send also copies the root's buffer into its
// result (Step::dst): through the fifo in the same pass over the source,
// single copy while the receiver reads.  As a program of its own the copy
// read the source a second time: 1.02-1.25x the time from 512 KiB
// (perf/RESULTS.md, "2026-12-06: the 2-rank broadcast's own copy in its
// send").  A larger buffer makes the root wait for fifo room, and a copy of
// its own fills those waits: fused, a 16 MiB broadcast took 1.25x the time
// in the host's fast phase (8 rounds; "2026-12-06: a fast spell, the
// structure issue's shm cells and the broadcast's own copy").
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
      if (bytes <= x.cfg->fifoBytes) {
        t.sendKeeping(x.next(), s, d, bytes);
      } else {
        t.send(x.next(), s, bytes);
        t.local(s, d, bytes);
      }
      t.hear(x.prev(), bytes);  // the receiver's descriptor
    } else {
      t.recv(x.prev(), d, bytes);
      t.greet(x.next());
    }
    return;
  }
  ph->progs.resize(1);
  if (pos == 0)
    ph->progs[0].add({nullptr, x.next(), s, src != dst ? d : nullptr, bytes});
  else
    ph->progs[0].add({x.prev(), pos == n - 1 ? nullptr : x.next(), nullptr, d, bytes});
  if (pos == 0) Transfers(ph, false).hear(x.prev(), bytes);    // the last rank's descriptor
  if (pos == n - 1) Transfers(ph, false).greet(x.next());
}

}  // namespace tern
