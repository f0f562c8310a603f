// Single copy: direct headers, the receiver's answer, the payload (direct_transfer.h).
#include "engine/direct_transfer.h"

#include <algorithm>
#include <string>

#include "base/dtype.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/operation.h"
#include "engine/step_payload.h"
#include "engine/stream_marks.h"
#include "engine/stream_records.h"

namespace tern {

namespace {

// Which path a direct transfer took, at INFO the first time per connection
// (a training loop repeats the same transfers), at TRACE every time.
void notePath(Conn* c, unsigned bit, const std::string& what) {
  unsigned& logged = marks(c).pathsLogged;
  const bool first = !(logged & bit);
  logged |= bit;
  if (first) TERN_LOG(Info, "%s (rank %d, %s)", what.c_str(), c->peer, c->name());
  else TERN_LOG(Trace, "%s (rank %d, %s)", what.c_str(), c->peer, c->name());
}
enum : unsigned { kPathIpc = 1, kPathStaged = 2, kPathNoExport = 4 };

bool offers(size_t min, size_t bytes) { return min > 0 && bytes >= min; }

// How the sender posts a direct step (DirectHeader's mode); 2 also names
// the buffer beside the fifo.  kWait: not yet (the handle's one slot still
// belongs to an earlier transfer that the receiver has not finished).
// Host memory from ternMemAlloc goes as a device buffer does (mode 2: the
// receiver maps it and copies at memcpy's rate); other host memory is read
// with process_vm_readv where that is on (mode 1), else streams.
// Host memory goes mapped from kSharedHostMin: below it the sender's wait
// for the receiver's copy costs more than the fifo's second copy (a 2-rank
// send/recv of 64 KiB took 1.07-1.2x the fifo's time, of 128 KiB 0.65x;
// perf/RESULTS.md, "2026-12-06: host memory the peers map").
constexpr uint32_t kWait = ~0u;
constexpr size_t kSharedHostMin = 128 << 10;
// A step its receiver reduces goes only mapped out of host memory (the
// receiver reduces straight out of the mapping, where a process_vm_readv
// read or a device copy would need a buffer to land in first), and a
// reduce's only up to kMappedReduceMax: above it the fifo's pipeline, the
// sender copying while the root reduces, is faster than the root reading
// the whole buffer alone (a 2-rank reduce 1.22-1.27x faster mapped at
// 128-512 KiB, 0.97x at 1 MiB, 0.81x at 8 MiB; perf/RESULTS.md,
// "2026-12-06: host memory the peers map").  A reduce-scatter's sender has
// its own block to reduce meanwhile (Step::mutualReduce): no cap.
constexpr size_t kMappedReduceMax = 512 << 10;
uint32_t directMode(const MemOps& mem, const Step& s) {
  const bool host = mem.type() == MemType::Host;
  const bool reduced = s.feedsReduce || s.mutualReduce;
  if (reduced && (!host || (s.feedsReduce && s.bytes > kMappedReduceMax))) return 0;
  const uint32_t otherwise = host && !reduced && offers(s.out->direct->hostMinBytes(), s.bytes) ? 1 : 0;
  if (!offers(s.out->direct->ipcMinBytes(), s.bytes) || (host && s.bytes < kSharedHostMin)) return otherwise;
  // The handle's slot is asked before a device export (a driver call each
  // time it is asked) and after a host one (a lookup: a host buffer that is
  // not shared never waits for the slot).
  const bool slotBusy = s.out->direct->acked() < marks(s.out).directPosted;
  if (!host && slotBusy) return kWait;
  IpcHandle h;
  uint64_t offset;
  if (!mem.ipcExport(s.local, &h, &offset)) {
    if (!host)
      notePath(s.out, kPathNoExport, "device buffer cannot be exported over IPC: staged through host memory");
    return otherwise;
  }
  if (slotBusy) return kWait;
  s.out->direct->ipcPost(h, offset);
  return 2;
}

}  // namespace

// The direct header: the sender posts its buffer (or says the payload
// streams as usual).
void writeDirect(Operation& op, Program& p, const Step& s, size_t* left) {
  if (*left == 0) return;
  const uint32_t mode = directMode(*op.ctx.mem, s);
  DirectHeader h{kDirectMagic, mode, s.bytes,
                 static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.local)), 0};
  if (mode == kWait || !putRecord(s.out, h)) return;
  p.directNow = mode != 0;
  if (p.directNow) p.ticket = marks(s.out).directPosted += s.bytes;
  *left = 0;
}

namespace {

// The receiver's answer to a posted transfer: read it (host into host),
// copy it over IPC (device into device), or decline it (the kinds differ,
// or the peer's device buffer cannot be opened here).
void acceptDirect(Operation& op, Program& p, const Step& s, const DirectHeader& h) {
  const MemOps& mem = *op.ctx.mem;
  const bool host = mem.type() == MemType::Host;
  const uint64_t ticket = marks(s.in).directSeen += h.bytes;
  std::string why;
  if (h.mode == 1 && host && !s.reduce) {
    p.directNow = true;
    p.peerAddr = h.addr;
    TERN_LOG(Trace, "reads %llu bytes of rank %d's buffer directly (single copy)",
             (unsigned long long)h.bytes, s.in->peer);
    return;
  }
  if (h.mode == 2 && (host || !s.reduce)) {
    uint64_t offset = 0;
    if (char* base = s.in->direct->ipcMap(mem, h.bytes, &offset, &why)) {
      p.directNow = true;
      p.ipcSrc = base + offset;
      notePath(s.in, kPathIpc,
               host ? "shared host memory: one copy out of the peer's ternMemAlloc buffer"
                    : "device buffers over IPC: a device-to-device copy from the peer's buffer");
      return;
    }
  }
  s.in->direct->decline(ticket, h.bytes);
  if (why.empty() && s.reduce) why = "this rank reduces it, out of mapped host memory only";
  if (why.empty()) why = host ? "this rank's buffer is host memory" : "this rank's buffer is device memory";
  notePath(s.in, kPathStaged,
           std::string(h.mode == 2 ? "the peer's shared buffer" : "the peer's host buffer") +
               " streams through the fifo: " + why);
}

}  // namespace

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

namespace {

// A sender whose posted buffer was read lets go of it; the receiver checks
// the peer did not fail while it read (a failed sender's caller may have
// changed the bytes), then acknowledges.
ternResult_t checkSenderAlive(const Step& s, const char* how) {
  if (s.in->direct->abandoned() || s.in->direct->peerExited())
    return setError(ternRemoteError, "rank " + std::to_string(s.in->peer) + " failed or exited while "
                                     "this rank read its " + how + ": the data received is not valid");
  return ternSuccess;
}

// The receiver over IPC: the rest of the payload in one device copy on the
// operation's work stream, acknowledged once its fence is done; from host
// memory, a slice of at most `limit` now (as process_vm_readv's reads), so
// the executor turns to other operations between slices, copied or reduced
// (whole elements) straight out of the mapping.
ternResult_t ipcPayload(const MemOps& mem, Program& p, const Step& s, const Reduction& red, int nranks,
                        size_t limit, size_t* units, bool* moved) {
  if (!mem.async()) {
    size_t n = std::min(s.bytes - p.off, limit);
    if (s.reduce) n -= n % typeSize(red.dt);
    if (n == 0) return ternSuccess;
    executeStep(mem, s, p.ipcSrc + p.off, nullptr, p.off, n, red, nranks);
    TERN_CHECK(checkSenderAlive(s, "shared host buffer"));
    s.in->direct->ack(n);
    countIpc(n);
    *units = n;
    return ternSuccess;
  }
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
  s.in->direct->ack(*units);
  countIpc(*units);
  p.ipcInFlight = false;
  return ternSuccess;
}

}  // namespace

ternResult_t directPayload(const MemOps& mem, Program& p, const Step& s, const Reduction& red, int nranks,
                           size_t limit, size_t* units, bool* moved) {
  *units = 0;
  if (s.out) {
    // Its own copy (Step::dst) while the receiver reads: both cores copy.
    const bool own = s.dst && s.dst != s.local;
    if (own && p.ownCopied < s.bytes) {
      const size_t n = std::min(s.bytes - p.ownCopied, limit);
      mem.copy(s.dst + p.ownCopied, s.local + p.ownCopied, n);
      p.ownCopied += n;
      if (mem.async()) p.fence = mem.fence();
      *moved = true;
      return ternSuccess;
    }
    if (s.out->direct->acked() < p.ticket || (own && mem.async() && !mem.done(p.fence))) return ternSuccess;
    *moved = true;
    if (s.out->direct->declined(p.ticket)) {
      p.directNow = false;
      return ternSuccess;
    }
    s.out->countSent(s.bytes);
    *units = s.bytes - p.off;
  } else if (p.ipcSrc) {
    TERN_CHECK(ipcPayload(mem, p, s, red, nranks, limit, units, moved));
  } else {
    size_t n = std::min(s.bytes - p.off, limit);
    if (ternResult_t r = s.in->direct->read(s.dst + p.off, p.peerAddr + p.off, n); r != ternSuccess) {
      // A sender that failed takes its buffer back, which may be unmapped by
      // now (EFAULT): its failure, marked before that, is the cause to report.
      TERN_CHECK(checkSenderAlive(s, "buffer"));
      return r;
    }
    // Checked after the read: a sender marks itself failed before its
    // caller may touch the buffer, so no mark now means the bytes were valid.
    TERN_CHECK(checkSenderAlive(s, "buffer"));
    s.in->direct->ack(n);
    *units = n;
  }
  p.off += *units;
  return ternSuccess;
}

}  // namespace tern
