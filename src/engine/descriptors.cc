// Peers' descriptors heard on a stream, and the ones streams owe (descriptors.h).
#include "engine/descriptors.h"

#include "base/error.h"
#include "engine/operation.h"
#include "engine/stream_marks.h"
#include "engine/stream_records.h"

namespace tern {

void takeDesc(Conn* in, const OpDesc& d, size_t bytes) {
  in->recvConsume(bytes);
  marks(in).heard = d;
}

bool putDesc(Conn* out, const OpDesc& d, bool mayRepeat) {
  StreamMarks& m = marks(out);
  const bool ok = mayRepeat && repeats(m.sent, d) ? putRecord(out, repeatWord(d)) : putRecord(out, d);
  if (ok) m.sent = d;
  return ok;
}

bool peekPast(Conn* in, OpDesc* d, bool* owed, size_t* bytes) {
  size_t len;
  if (!bytes) bytes = &len;
  for (;;) {
    size_t pad = recordSkip(in->recvPos(), in->recordAlign());
    skipIn(in, &pad);
    if (pad != 0) return false;
    const char* ip;
    const size_t avail = in->recvAvail(&ip);
    if (!(*bytes = descRecordAt(ip, avail, marks(in).heard, d))) return false;
    *owed = false;
    OwedDescs& owing = marks(in).owed;
    if (owing.empty()) return true;
    const OpDesc& due = owing.front();
    // An interleaved message (a weight stream's chunk) that slipped in
    // ahead of the owed descriptor is its reader's; the owed one follows.
    if (d->magic == kDescMagic && d->kind != due.kind && opKind(d->kind).interleaved) return true;
    if (!descMatches(due, *d)) {
      *owed = true;
      return true;
    }
    takeDesc(in, *d, *bytes);
    owing.pop();
  }
}

bool peekDesc(Conn* in, OpDesc* d) {
  bool owed;
  return peekPast(in, d, &owed) && d->magic == kDescMagic;
}

Heard hear(Conn* in, const OpDesc& mine, OpDesc* theirs) {
  bool owed;
  size_t bytes;
  if (!peekPast(in, theirs, &owed, &bytes)) return Heard::kNotYet;
  if (owed) return Heard::kOwedMismatch;
  if (theirs->magic == kDescMagic && theirs->kind != mine.kind && opKind(theirs->kind).interleaved)
    return Heard::kNotYet;
  if (!descMatches(mine, *theirs)) return Heard::kMismatch;
  takeDesc(in, *theirs, bytes);
  return Heard::kMatched;
}

ternResult_t heardError(Heard h, const Conn* in, const OpDesc& mine, const OpDesc& theirs) {
  if (h == Heard::kOwedMismatch)
    return setError(ternInvalidUsage, "a call this rank completed earlier did not match its peer's: " +
                                          descMismatch(marksIfAny(in)->owed.front(), theirs));
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
      if (marks(p.steps[i].in).owed.full()) return false;
  for (Program& p : ph.progs)
    for (; p.cur < p.steps.size(); ++p.cur) marks(p.steps[p.cur].in).owed.push(desc);
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

}  // namespace tern
