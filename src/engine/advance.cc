// advance: one program's steps through their streams, each step's lead
// (padding, the operation's descriptor on its first use of a stream, a codec
// or direct header) then its payload (step_payload.cc, direct_transfer.cc),
// within a byte budget.
#include "engine/advance.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "engine/descriptors.h"
#include "engine/direct_transfer.h"
#include "engine/operation.h"
#include "engine/step_payload.h"
#include "engine/stream_marks.h"
#include "engine/stream_claims.h"
#include "engine/stream_records.h"

namespace tern {

namespace {

// Bytes handled per pass of a step: small enough that the next hop can start
// while we work, large enough to amortise the fifo bookkeeping.
constexpr size_t kBurst = 256 << 10;
// A step whose receiver reduces what it sends (Step::feedsReduce): the
// receiver, not the copy, sets the pace, so it should start at once.  A
// 2-rank reduce of 128 KiB-2 MiB took 0.82-0.92x its time with 8-16 KiB
// bursts; the same bursts on steps whose receiver only copies (broadcast,
// scatter, send/receive) took 1.05-1.24x, and over tcp, whose pump sends
// what is committed anyway, the reduce itself 1.16-1.60x (perf/RESULTS.md,
// 2026-12-05: a reduce's first sender in small bursts).  So only where the
// receiver reads our commits in place (no pump: shared memory).
constexpr size_t kFeedBurst = 16 << 10;

// Where this step's message starts on a stream at `pos`: the operation's
// first use of a stream is preceded by its descriptor.
void lay(Lead& l, const Conn* c, uint64_t pos, bool greetedAlready, const Step& s, uint32_t unit) {
  const bool direct = directCandidate(s);
  l.desc = greetedAlready ? 0 : sizeof(OpDesc);
  l.skip = l.desc ? recordSkip(pos, c->recordAlign()) : alignUp(pos, direct ? 32 : s.codec ? 16 : 8);
  pos += l.skip + l.desc;
  l.hdr = direct ? sizeof(DirectHeader) : s.codec ? sizeof(StepHeader) : 0;
  l.skip2 = direct ? 0 : s.codec ? alignUp(pos + l.hdr, unit) : alignUp(pos, 8);
}

void layout(Operation& op, Program& p, const Step& s) {
  if (s.in) lay(p.in, s.in, s.in->recvPos(), op.greetedInFrom(s.in), s, s.inUnit);
  if (s.out) lay(p.out, s.out, s.out->sendPos(), op.greetedOutTo(s.out), s, s.outUnit);
  p.started = true;
  p.directNow = false;
  p.ownCopied = 0;
  p.ipcSrc = nullptr;
  p.ipcInFlight = false;
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
  StreamMarks& m = marks(in);
  if (m.reader != &op) {
    m.reader = &op;
    op.held.push_back(in);
  }
  *left = 0;
  return ternSuccess;
}

// A plain step's descriptor may repeat the stream's last in one word
// (op_desc.h, kRepeatTag); one with a header after it goes whole, so the
// reader, which learns the record's length only as it reads it, lays the
// header and its padding out as the writer did (lay).
void writeDesc(Operation& op, const Step& s, bool plain, size_t* left) {
  if (*left == 0 || !putDesc(s.out, op.desc, plain)) return;
  op.greetedOut.push_back(s.out);
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
  const bool between = !s.in || i.desc == 0 || !beingRead(s.in, &op);
  if (s.in && between) {
    if (i.desc) i.skip = recordSkip(s.in->recvPos(), s.in->recordAlign());
    skipIn(s.in, &i.skip);
    if (i.skip == 0) TERN_CHECK(readDesc(op, s.in, &i.desc));
    if (i.skip + i.desc == 0)
      TERN_CHECK(direct ? readDirect(op, p, s, &i.hdr) : readHeader(s, s.in, &i.hdr));
    if (i.skip + i.desc + i.hdr == 0) skipIn(s.in, &i.skip2);
  }
  if (s.out) {
    padOut(s.out, &o.skip);
    if (o.skip == 0) writeDesc(op, s, !direct && !s.codec, &o.desc);
    if (o.skip + o.desc == 0) direct ? writeDirect(op, p, s, &o.hdr) : writeHeader(s, s.out, &o.hdr);
    if (o.skip + o.desc + o.hdr == 0) padOut(s.out, &o.skip2);
  }
  *ready = i.left() + o.left() == 0;
  return ternSuccess;
}

ternResult_t advanceSteps(Operation& op, Program& p, const Reduction& red, int nranks, size_t budget,
                          bool* moved) {
  size_t spent = 0;
  while (p.cur < p.steps.size()) {
    const Step& s = p.steps[p.cur];
    if (s.deferrable) {  // the peer's descriptor, if it came (else owed: phaseThrough)
      OpDesc theirs;
      Heard h = beingRead(s.in, &op) ? Heard::kNotYet : hear(s.in, op.desc, &theirs);
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
    const size_t burst = s.feedsReduce && !s.out->needsProgress() ? kFeedBurst : kBurst;
    while (p.off < s.bytes) {
      if (p.pending) {
        if (!settle(*op.ctx.mem, p, s)) return ternSuccess;
        *moved = true;
        continue;
      }
      if (spent >= budget) return ternSuccess;
      const size_t limit = std::min(burst, budget - spent);
      size_t units;
      if (p.directNow) {
        TERN_CHECK(directPayload(*op.ctx.mem, p, s, red, nranks, limit, &units, moved));
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

}  // namespace tern
