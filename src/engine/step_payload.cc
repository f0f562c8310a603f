// A step's payload: reduced or copied through the fifos, unstaged, parked (step_payload.h).
#include "engine/step_payload.h"

#include <algorithm>

#include <sched.h>

#include "base/dtype.h"

namespace tern {

void executeStep(const MemOps& mem, const Step& s, const char* in, char* out, size_t off, size_t n,
                 const Reduction& red, int nranks) {
  const char* loc = s.local ? s.local + off : nullptr;
  char* dst = s.dst ? s.dst + off : nullptr;
  if (s.reduce) {
    char* target = dst ? dst : out;
    mem.reduce(target, in, loc, n / typeSize(red.dt), red.dt, red.op, s.finalAvg ? nranks : 0);
    if (dst && out) mem.copy(out, dst, n);
    return;
  }
  const char* src = in ? in : loc;
  if (out) mem.copy(out, src, n);
  if (dst && dst != src) mem.copy(dst, src, n);
}

namespace {

// An asynchronous memory type only enqueued the burst: its fifo slots stay
// the operation's (nothing consumed or committed) until a fence taken now
// is done (settle below).  Returns the burst's units.
size_t park(const MemOps& mem, Program& p, size_t in, size_t out, size_t units) {
  p.pending = true;
  p.fence = mem.fence();
  p.pendIn = in;
  p.pendOut = out;
  p.pendUnits = units;
  return units;
}

// On a low-latency sibling (transport/ll.h) the views recvAvail / sendSpace
// give are the stream's private buffers, reused by the next call: an
// asynchronous burst there cannot be parked, so the driver waits out its
// fence (a small message: a few bytes' copy on the work stream, which the
// operation's start already found idle).  Both ends keep choosing the
// sibling from the descriptor alone, whatever memory each side's buffers are.
bool mustSettleNow(const MemOps& mem, const Step& s) {
  if (!mem.async() || !((s.in && s.in->owner) || (s.out && s.out->owner))) return false;
  uint64_t f = mem.fence();
  while (!mem.done(f)) sched_yield();
  return true;
}

// A plain transfer's bytes between the caller's host buffer and connections
// that move them without staging (Conn::unstaged): a send-only step's
// from its source, once what was staged before it (its descriptor) has gone
// to the kernel; a receive-only step's into its destination, once what was
// staged has been read; a forwarding step (a ring allgather's, broadcast's)
// receives into its destination and sends on from there, what it received
// and has not sent yet being Program::fwd.  False when the step is not such a
// transfer (it stages); else *moved says how many bytes the step is done
// with (0: not now).
bool unstagedPayload(const MemOps& mem, Program& p, const Step& s, size_t n, size_t* moved) {
  auto eligible = [&](const Conn* c) {
    return c->unstaged && c->unstaged->minBytes() > 0 && s.bytes >= c->unstaged->minBytes();
  };
  // Cheapest first: a small operation (or any over shm) leaves after one call;
  // a local copy (no connection: an own block) is not a transfer.
  const Conn* c = s.in ? s.in : s.out;
  if (s.reduce || !c || !eligible(c) || mem.type() != MemType::Host) return false;
  const char* staged;
  auto nothingStaged = [&] { return s.in->recvAvail(&staged) == 0; };
  const size_t off = p.off;
  if (s.out && !s.in && s.local && (!s.dst || s.dst == s.local)) {
    // Beside other levels it stages (Conn::mixed): 4 ranks at 1 Gbit/s, an
    // urgent allreduce beside a bulk one took 2.4-3.1x its solo time in
    // about half the runs with these sends unstaged, 1.0-1.06x staged.
    if (s.out->mixed) return false;
    *moved = s.out->unstaged->send(s.local + off, n);
    return true;
  }
  if (s.in && !s.out && s.dst && nothingStaged()) {
    *moved = s.in->unstaged->recv(s.dst + off, n, s.bytes - off - n);
    return true;
  }
  if (s.in && s.out && s.dst && !s.local && eligible(s.out) && (p.fwd > 0 || nothingStaged())) {
    // It receives on while what it received waits to be sent: a forwarder
    // that read its socket only once the last slice had gone on (which the
    // bulk bound paces) read in bursts, the kernel kept its receive window
    // small, and the sender upstream fell below the link's rate (a 4-rank
    // bulk allreduce at 1 Gbit/s beside urgent ones: 1.47x its time).  The
    // bytes land in the destination: receiving ahead costs no memory.
    const size_t got = off + p.fwd, m = std::min(n, s.bytes - got);
    if (m > 0) p.fwd += s.in->unstaged->recv(s.dst + got, m, s.bytes - got - m);
    *moved = p.fwd ? s.out->unstaged->send(s.dst + off, p.fwd) : 0;
    p.fwd -= *moved;
    return true;
  }
  return false;
}

}  // namespace

size_t payload(const MemOps& mem, Program& p, const Step& s, const Reduction& red, int nranks,
               size_t limit) {
  const char* in = nullptr;
  char* out = nullptr;
  size_t n = s.bytes - p.off;
  if (s.codec) {
    n = std::min(n, limit / s.outUnit + 1);
    if (s.in) n = std::min(n, s.in->recvAvail(&in) / s.inUnit);
    if (s.out) n = std::min(n, s.out->sendSpace(&out) / s.outUnit);
    if (n == 0) return 0;
    s.codec->run(in, out, p.off, n);
    if (mem.async() && !mustSettleNow(mem, s))
      return park(mem, p, s.in ? n * s.inUnit : 0, s.out ? n * s.outUnit : 0, n);
    if (s.in) s.in->recvConsume(n * s.inUnit);
    if (s.out) s.out->sendCommit(n * s.outUnit);
  } else {
    n = std::min(n, limit);
    size_t k;
    if (unstagedPayload(mem, p, s, n, &k)) {
      p.off += k;
      return k;
    }
    if (s.in) n = std::min(n, s.in->recvAvail(&in));
    if (s.out) n = std::min(n, s.out->sendSpace(&out));
    n -= n % (s.reduce ? typeSize(red.dt) : 1);  // whole elements only
    if (n == 0) return 0;
    executeStep(mem, s, in, out, p.off, n, red, nranks);
    if (mem.async() && !mustSettleNow(mem, s)) return park(mem, p, s.in ? n : 0, s.out ? n : 0, n);
    if (s.in) s.in->recvConsume(n);
    if (s.out) s.out->sendCommit(n);
  }
  p.off += n;
  return n;
}

bool settle(const MemOps& mem, Program& p, const Step& s) {
  if (!mem.done(p.fence)) return false;
  if (p.pendIn) s.in->recvConsume(p.pendIn);
  if (p.pendOut) s.out->sendCommit(p.pendOut);
  p.off += p.pendUnits;
  p.pending = false;
  return true;
}

}  // namespace tern
