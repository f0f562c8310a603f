#include "engine/program.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <sched.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/operation.h"

namespace tern {

namespace {

// Bytes handled per pass of a step: small enough that the next hop can start
// while we work, large enough to amortise the fifo bookkeeping.
constexpr size_t kBurst = 256 << 10;

}  // namespace

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

// Where this step's message starts on a stream at `pos`: the operation's
// first use of a stream is preceded by its descriptor.
void lay(Lead& l, const Conn* c, uint64_t pos, bool greetedAlready, const Step& s, uint32_t unit) {
  const bool direct = directCandidate(s);
  l.desc = greetedAlready ? 0 : sizeof(OpDesc);
  l.skip = alignUp(pos, l.desc ? c->recordAlign() : direct ? 32 : s.codec ? 16 : 8);
  pos += l.skip + l.desc;
  l.hdr = direct ? sizeof(DirectHeader) : s.codec ? sizeof(StepHeader) : 0;
  l.skip2 = direct ? 0 : s.codec ? alignUp(pos + l.hdr, unit) : alignUp(pos, 8);
}

void layout(Operation& op, Program& p, const Step& s) {
  if (s.in) lay(p.in, s.in, s.in->recvPos(), op.greetedInFrom(s.in), s, s.inUnit);
  if (s.out) lay(p.out, s.out, s.out->sendPos(), op.greetedOutTo(s.out), s, s.outUnit);
  p.started = true;
  p.directNow = false;
  p.ipcSrc = nullptr;
  p.ipcInFlight = false;
}

// Skips up to *left bytes of padding on the receive side / emits them on the
// send side, as far as the fifo allows.
void skipIn(Conn* c, size_t* left) {
  const char* p;
  size_t k;
  while (*left > 0 && (k = std::min(c->recvAvail(&p), *left)) > 0) {
    c->recvConsume(k);
    *left -= k;
  }
}

void padOut(Conn* c, size_t* left) {
  char* p;
  size_t k;
  while (*left > 0 && (k = std::min(c->sendSpace(&p), *left)) > 0) {
    c->sendCommit(k);
    *left -= k;
  }
}

// A fixed-size record on a stream (descriptor, header): written whole once
// the fifo has room for it, read (not yet consumed) once it has arrived.
// Records are aligned on the stream, so none straddles the wrap point.
template <class T>
bool putRecord(Conn* out, const T& v) {
  char* o;
  if (out->sendSpace(&o) < sizeof v) return false;
  memcpy(o, &v, sizeof v);
  out->sendCommit(sizeof v);
  return true;
}

template <class T>
bool peekRecord(Conn* in, T* v) {
  const char* ip;
  if (in->recvAvail(&ip) < sizeof *v) return false;
  memcpy(v, ip, sizeof *v);
  fromWire(v);
  return true;
}

// Reads and checks the peer's descriptor once it has arrived.  Another
// kind's framed message ahead of ours (a weight stream's chunk) is left to
// its reader (a standing operation that drains it); ours follows it.
ternResult_t readDesc(Operation& op, Conn* in, size_t* left) {
  OpDesc theirs;
  if (*left == 0) return ternSuccess;
  Heard h = hear(in, op.desc, &theirs);
  if (h == Heard::kNotYet) return ternSuccess;
  if (h != Heard::kMatched) return heardError(h, in, op.desc, theirs);
  op.greetedIn.push_back(in);
  if (in->reader != &op) {
    in->reader = &op;
    op.held.push_back(in);
  }
  *left = 0;
  return ternSuccess;
}

void writeDesc(Operation& op, Conn* out, size_t* left) {
  if (*left == 0 || !putRecord(out, op.desc)) return;
  op.greetedOut.push_back(out);
  *left = 0;
}

ternResult_t readHeader(const Step& s, Conn* in, size_t* left) {
  StepHeader h;
  if (*left == 0 || !peekRecord(in, &h)) return ternSuccess;
  if (h.magic != kStepMagic || h.unit != s.inUnit || h.groups != s.bytes)
    return setError(ternRemoteError,
                    "malformed chunk header from rank " + std::to_string(in->peer) + ": unit " +
                        std::to_string(h.unit) + " bytes, " + std::to_string(h.groups) +
                        " groups; expected " + std::to_string(s.inUnit) + " and " +
                        std::to_string(s.bytes));
  in->recvConsume(sizeof h);
  *left = 0;
  return ternSuccess;
}

void writeHeader(const Step& s, Conn* out, size_t* left) {
  if (*left == 0 || !putRecord(out, StepHeader{kStepMagic, s.outUnit, s.bytes})) return;
  *left = 0;
}

// Which path a direct transfer took, at INFO the first time per connection
// (a training loop repeats the same transfers), at TRACE every time.
void notePath(Conn* c, unsigned bit, const std::string& what) {
  const bool first = !(c->pathsLogged & bit);
  c->pathsLogged |= bit;
  if (first) TERN_LOG(Info, "%s (rank %d, %s)", what.c_str(), c->peer, c->name());
  else TERN_LOG(Trace, "%s (rank %d, %s)", what.c_str(), c->peer, c->name());
}
enum : unsigned { kPathIpc = 1, kPathStaged = 2, kPathNoExport = 4 };

bool offers(size_t min, size_t bytes) { return min > 0 && bytes >= min; }

// How the sender posts a direct step (DirectHeader's mode); 2 also names
// the buffer beside the fifo.  kWait: not yet (the handle's one slot still
// belongs to an earlier transfer that the receiver has not finished).
constexpr uint32_t kWait = ~0u;
uint32_t directMode(const MemOps& mem, const Step& s) {
  if (mem.type() == MemType::Host) return offers(s.out->hostDirectMin(), s.bytes) ? 1 : 0;
  if (!offers(s.out->ipcMin(), s.bytes)) return 0;
  if (s.out->directAcked() < s.out->directPosted) return kWait;
  IpcHandle h;
  uint64_t offset;
  if (!mem.ipcExport(s.local, &h, &offset)) {
    notePath(s.out, kPathNoExport, "device buffer cannot be exported over IPC: staged through host memory");
    return 0;
  }
  s.out->ipcPost(h, offset);
  return 2;
}

// The direct header: the sender posts its buffer (or says the payload
// streams as usual).
void writeDirect(Operation& op, Program& p, const Step& s, size_t* left) {
  if (*left == 0) return;
  const uint32_t mode = directMode(*op.ctx.mem, s);
  DirectHeader h{kDirectMagic, mode, s.bytes,
                 static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.local)), 0};
  if (mode == kWait || !putRecord(s.out, h)) return;
  p.directNow = mode != 0;
  if (p.directNow) p.ticket = s.out->directPosted += s.bytes;
  *left = 0;
}

// The receiver's answer to a posted transfer: read it (host into host),
// copy it over IPC (device into device), or decline it (the kinds differ,
// or the peer's device buffer cannot be opened here).
void acceptDirect(Operation& op, Program& p, const Step& s, const DirectHeader& h) {
  const MemOps& mem = *op.ctx.mem;
  const bool host = mem.type() == MemType::Host;
  s.in->directSeen += h.bytes;
  std::string why;
  if (h.mode == 1 && host) {
    p.directNow = true;
    p.peerAddr = h.addr;
    TERN_LOG(Trace, "reads %llu bytes of rank %d's buffer directly (single copy)",
             (unsigned long long)h.bytes, s.in->peer);
    return;
  }
  if (h.mode == 2 && !host) {
    uint64_t offset = 0;
    if (char* base = s.in->ipcMap(mem, &offset, &why)) {
      p.directNow = true;
      p.ipcSrc = base + offset;
      notePath(s.in, kPathIpc, "device buffers over IPC: a device-to-device copy from the peer's buffer");
      return;
    }
  }
  s.in->directDecline(h.bytes);
  if (why.empty()) why = host ? "this rank's buffer is host memory" : "this rank's buffer is device memory";
  notePath(s.in, kPathStaged, std::string(h.mode == 2 ? "the peer's device buffer" : "the peer's host buffer") +
                                  " streams through the fifo: " + why);
}

ternResult_t readDirect(Operation& op, Program& p, const Step& s, size_t* left) {
  DirectHeader h;
  if (*left == 0 || !peekRecord(s.in, &h)) return ternSuccess;
  if (h.magic != kDirectMagic || h.mode > 2 || h.bytes != s.bytes)
    return setError(ternRemoteError, "malformed transfer header from rank " +
                                         std::to_string(s.in->peer) + " (" +
                                         std::to_string(h.bytes) + " bytes; expected " +
                                         std::to_string(s.bytes) + ")");
  s.in->recvConsume(sizeof h);
  if (h.mode != 0) acceptDirect(op, p, s, h);
  *left = 0;
  return ternSuccess;
}

// A sender whose posted buffer was read lets go of it; the receiver checks
// the peer did not fail while it read (a failed sender's caller may have
// changed the bytes), then acknowledges.
ternResult_t checkSenderAlive(const Step& s, const char* how) {
  if (s.in->directAbandoned() || s.in->peerExited())
    return setError(ternRemoteError, "rank " + std::to_string(s.in->peer) + " failed or exited while "
                                     "this rank read its " + how + ": the data received is not valid");
  return ternSuccess;
}

// The receiver over IPC: the rest of the payload in one device copy on the
// operation's work stream; acknowledged once its fence is done.
ternResult_t ipcPayload(const MemOps& mem, Program& p, const Step& s, size_t* units, bool* moved) {
  if (!p.ipcInFlight) {
    mem.copy(s.dst + p.off, p.ipcSrc + p.off, s.bytes - p.off);
    p.fence = mem.fence();
    p.ipcInFlight = *moved = true;
    return ternSuccess;
  }
  if (!mem.done(p.fence)) return ternSuccess;
  if (mem.error() != ternSuccess) return setError(mem.error(), mem.lastError());
  TERN_CHECK(checkSenderAlive(s, "device buffer over IPC"));
  *units = s.bytes - p.off;
  s.in->directAck(*units);
  countIpc(*units);
  p.ipcInFlight = false;
  return ternSuccess;
}

// A direct step's payload: the receiver reads a slice of the sender's
// buffer; the sender is done once the receiver has read all of it, or
// streams it after all if the receiver declined (p.directNow turns false).
ternResult_t directPayload(const MemOps& mem, Program& p, const Step& s, size_t limit,
                           size_t* units, bool* moved) {
  *units = 0;
  if (s.out) {
    if (s.out->directAcked() < p.ticket) return ternSuccess;
    *moved = true;
    if (s.out->directDeclined(p.ticket)) {
      p.directNow = false;
      return ternSuccess;
    }
    s.out->countSent(s.bytes);
    *units = s.bytes - p.off;
  } else if (p.ipcSrc) {
    TERN_CHECK(ipcPayload(mem, p, s, units, moved));
  } else {
    size_t n = std::min(s.bytes - p.off, limit);
    if (ternResult_t r = s.in->directRead(s.dst + p.off, p.peerAddr + p.off, n); r != ternSuccess) {
      // A sender that failed takes its buffer back, which may be unmapped by
      // now (EFAULT): its failure, marked before that, is the cause to report.
      TERN_CHECK(checkSenderAlive(s, "buffer"));
      return r;
    }
    // Checked after the read: a sender marks itself failed before its
    // caller may touch the buffer, so no mark now means the bytes were valid.
    TERN_CHECK(checkSenderAlive(s, "buffer"));
    s.in->directAck(n);
    *units = n;
  }
  p.off += *units;
  return ternSuccess;
}

// Padding, descriptor, header and padding before the payload, each in turn
// as far as the fifos allow.  *ready once all of them are through.
ternResult_t prologue(Operation& op, Program& p, const Step& s, bool* ready) {
  Lead& i = p.in;
  Lead& o = p.out;
  const bool direct = directCandidate(s);
  // Before our descriptor, the stream may be in the middle of another
  // operation's message (an interleaved one's, being read): wait for its
  // end; and that reader may take bytes (padding, its whole message) from
  // under us, so align from where the stream is now.
  const bool between = !s.in || i.desc == 0 || !s.in->reader || s.in->reader == &op;
  if (s.in && between) {
    if (i.desc) i.skip = alignUp(s.in->recvPos(), s.in->recordAlign());
    skipIn(s.in, &i.skip);
    if (i.skip == 0) TERN_CHECK(readDesc(op, s.in, &i.desc));
    if (i.skip + i.desc == 0)
      TERN_CHECK(direct ? readDirect(op, p, s, &i.hdr) : readHeader(s, s.in, &i.hdr));
    if (i.skip + i.desc + i.hdr == 0) skipIn(s.in, &i.skip2);
  }
  if (s.out) {
    padOut(s.out, &o.skip);
    if (o.skip == 0) writeDesc(op, s.out, &o.desc);
    if (o.skip + o.desc == 0) direct ? writeDirect(op, p, s, &o.hdr) : writeHeader(s, s.out, &o.hdr);
    if (o.skip + o.desc + o.hdr == 0) padOut(s.out, &o.skip2);
  }
  *ready = i.left() + o.left() == 0;
  return ternSuccess;
}

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
// that move them without staging (Conn::unstagedMin): a send-only step's
// from its source, once what was staged before it (its descriptor) has gone
// to the kernel; a receive-only step's into its destination, once what was
// staged has been read; a forwarding step (a ring allgather's, broadcast's)
// receives into its destination and sends on from there, what it received
// and has not sent yet being Program::fwd.  False when the step is not such a
// transfer (it stages); else *moved says how many bytes the step is done
// with (0: not now).
bool unstagedPayload(const MemOps& mem, Program& p, const Step& s, size_t n, size_t* moved) {
  auto eligible = [&](const Conn* c) { return c->unstagedMin() > 0 && s.bytes >= c->unstagedMin(); };
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
    *moved = s.out->sendUnstaged(s.local + off, n);
    return true;
  }
  if (s.in && !s.out && s.dst && nothingStaged()) {
    *moved = s.in->recvUnstaged(s.dst + off, n, s.bytes - off - n);
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
    if (m > 0) p.fwd += s.in->recvUnstaged(s.dst + got, m, s.bytes - got - m);
    *moved = p.fwd ? s.out->sendUnstaged(s.dst + off, p.fwd) : 0;
    p.fwd -= *moved;
    return true;
  }
  return false;
}

// Moves as much payload as the fifos allow (up to `limit` bytes); returns the
// units moved (bytes for dense steps, groups for codec steps).
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

// An asynchronous burst (payload above) once its fence is done: its fifo
// bytes go to the transport and its units count.  False while it runs.
bool settle(const MemOps& mem, Program& p, const Step& s) {
  if (!mem.done(p.fence)) return false;
  if (p.pendIn) s.in->recvConsume(p.pendIn);
  if (p.pendOut) s.out->sendCommit(p.pendOut);
  p.off += p.pendUnits;
  p.pending = false;
  return true;
}

}  // namespace

// A stream's send side belongs to one operation from its first message until
// it lets go (letGo); an interleaved operation takes a free one unless an
// ordered operation issued before its message was posted waits for it (so
// what was issued first goes first: "push; barrier" on one rank and "wait
// for the version; barrier" on the other cannot wait for each other).
// A reservation is its message's until that goes, on a stream it already
// holds or not; another waiting interleaved message renews its own the next
// round (its task is asked every round), before an ordered operation issued
// later asks again.
bool claimOut(Operation& op, Conn* out) {
  if (!out) return true;
  if (out->writer == &op) {
    if (op.unordered) out->reservedAt = UINT64_MAX;
    return true;
  }
  if (out->writer || (op.unordered ? out->wantedBy < op.phase.postedAt : out->reservedAt < op.stamp)) {
    if (!op.unordered) out->wantedBy = std::min(out->wantedBy, op.stamp);
    return false;
  }
  out->writer = &op;
  (op.unordered ? out->reservedAt : out->wantedBy) = UINT64_MAX;
  op.held.push_back(out);
  return true;
}

void takeSmallChannels(Phase& ph, uint64_t opBytes) {
  for (const Program& p : ph.progs)
    for (const Step& s : p.steps)
      if (s.codec) return;
  auto small = [opBytes](Conn* c) {
    Conn* ll = c ? c->small(opBytes) : nullptr;
    return ll ? ll : c;
  };
  for (Program& p : ph.progs)
    for (Step& s : p.steps) {
      s.in = small(s.in);
      s.out = small(s.out);
    }
}

void letGo(Operation& op) {
  for (Conn* c : op.held) {
    if (c->writer == &op) c->writer = nullptr;
    if (c->reader == &op) c->reader = nullptr;
  }
  op.held.clear();
}

bool peekPast(Conn* in, OpDesc* d, bool* owed) {
  for (;;) {
    size_t pad = alignUp(in->recvPos(), in->recordAlign());
    skipIn(in, &pad);
    if (pad != 0 || !peekRecord(in, d)) return false;
    *owed = false;
    if (in->owed.empty()) return true;
    const OpDesc& due = in->owed.front();
    // An interleaved message (a weight stream's chunk) that slipped in
    // ahead of the owed descriptor is its reader's; the owed one follows.
    if (d->magic == kDescMagic && d->kind != due.kind && opKind(d->kind).interleaved) return true;
    if (!descMatches(due, *d)) {
      *owed = true;
      return true;
    }
    in->recvConsume(sizeof *d);
    in->owed.pop();
  }
}

bool peekDesc(Conn* in, OpDesc* d) {
  bool owed;
  return peekPast(in, d, &owed) && d->magic == kDescMagic;
}

Heard hear(Conn* in, const OpDesc& mine, OpDesc* theirs) {
  bool owed;
  if (!peekPast(in, theirs, &owed)) return Heard::kNotYet;
  if (owed) return Heard::kOwedMismatch;
  if (theirs->magic == kDescMagic && theirs->kind != mine.kind && opKind(theirs->kind).interleaved)
    return Heard::kNotYet;
  if (!descMatches(mine, *theirs)) return Heard::kMismatch;
  in->recvConsume(sizeof *theirs);
  return Heard::kMatched;
}

ternResult_t heardError(Heard h, const Conn* in, const OpDesc& mine, const OpDesc& theirs) {
  if (h == Heard::kOwedMismatch)
    return setError(ternInvalidUsage, "a call this rank completed earlier did not match its peer's: " +
                                          descMismatch(in->owed.front(), theirs));
  return setError(ternInvalidUsage, descMismatch(mine, theirs));
}

namespace {

// Whether only descriptor-only receives (Step::deferrable) are left.
bool onlyHearing(const Program& p) {
  for (size_t i = p.cur; i < p.steps.size(); ++i)
    if (!p.steps[i].deferrable) return false;
  return true;
}

// Leaves the descriptors still to hear to their streams, all or none.
bool oweRest(Phase& ph, const OpDesc& desc) {
  for (const Program& p : ph.progs)
    for (size_t i = p.cur; i < p.steps.size(); ++i)
      if (p.steps[i].in->owed.full()) return false;
  for (Program& p : ph.progs)
    for (; p.cur < p.steps.size(); ++p.cur) p.steps[p.cur].in->owed.push(desc);
  return true;
}

}  // namespace

bool phaseThrough(Phase& ph, const OpDesc& desc) {
  bool owing = false;
  for (const Program& p : ph.progs) {
    if (!onlyHearing(p)) return false;
    owing |= !p.done();
  }
  return !owing || oweRest(ph, desc);
}

namespace {

ternResult_t advanceSteps(Operation& op, Program& p, const Reduction& red, int nranks, size_t budget,
                          bool* moved) {
  size_t spent = 0;
  while (p.cur < p.steps.size()) {
    const Step& s = p.steps[p.cur];
    if (s.deferrable) {  // the peer's descriptor, if it came (else owed: phaseThrough)
      OpDesc theirs;
      Heard h = s.in->reader && s.in->reader != &op ? Heard::kNotYet : hear(s.in, op.desc, &theirs);
      if (h == Heard::kNotYet) return ternSuccess;
      if (h != Heard::kMatched) return heardError(h, s.in, op.desc, theirs);
      *moved = true;
      ++p.cur;
      continue;
    }
    if (!p.started) {
      if (!claimOut(op, s.out)) return ternSuccess;
      layout(op, p, s);
    }
    bool ready;
    TERN_CHECK(prologue(op, p, s, &ready));
    if (!ready) return ternSuccess;
    while (p.off < s.bytes) {
      if (p.pending) {
        if (!settle(*op.ctx.mem, p, s)) return ternSuccess;
        *moved = true;
        continue;
      }
      if (spent >= budget) return ternSuccess;
      const size_t limit = std::min(kBurst, budget - spent);
      size_t units;
      if (p.directNow) {
        TERN_CHECK(directPayload(*op.ctx.mem, p, s, limit, &units, moved));
        if (!p.directNow) continue;  // declined: the payload streams
      } else {
        units = payload(*op.ctx.mem, p, s, red, nranks, limit);
      }
      if (units == 0) return ternSuccess;
      spent += units * (s.codec ? s.outUnit : 1);
      *moved = true;
    }
    ++p.cur;
    p.off = 0;
    p.started = false;
  }
  return ternSuccess;
}

}  // namespace

// What the steps wrote becomes visible when the program stops (Conn::flush):
// the steps it went through are those from `first` to where it stands.
ternResult_t advance(Operation& op, Program& p, const Reduction& red, int nranks, size_t budget,
                     bool* moved) {
  const size_t first = p.cur;
  ternResult_t r = advanceSteps(op, p, red, nranks, budget, moved);
  for (size_t i = first; i <= p.cur && i < p.steps.size(); ++i)
    if (p.steps[i].out) p.steps[i].out->flush();
  return r;
}

ternResult_t checkBlockedOnGone(const Phase& ph, int rank, const char* what) {
  for (const Program& p : ph.progs) {
    if (p.done()) continue;
    const Step& s = p.steps[p.cur];
    const char* ip;
    size_t unit = s.codec ? s.inUnit : s.reduce ? typeSize(ph.red.dt) : 1;
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
// order), so a descriptor there is the peer's next operation.
ternResult_t checkOtherStream(const Operation& op, const Phase& ph) {
  for (const Program& p : ph.progs) {
    if (p.done() || !p.started) continue;
    Conn* in = p.steps[p.cur].in;
    if (!in || p.in.desc == 0) continue;  // not waiting for a descriptor
    Conn* other = in->owner ? in->owner : in->small(0);
    OpDesc d;
    if (!other || other->reader || !peekDesc(other, &d) || opKind(d.kind).interleaved) continue;
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
