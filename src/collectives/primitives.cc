#include "collectives/primitives.h"

#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "collectives/reduce_kernels.h"
#include "core/error.h"
#include "core/log.h"

namespace tern {

namespace {

// Bytes handled per pass of a step: small enough that the next hop can start
// while we work, large enough to amortise the fifo bookkeeping.
constexpr size_t kBurst = 256 << 10;

// Every message starts aligned on its stream: dense payloads to 8 bytes,
// codec headers to 16 and codec groups to their unit.  Fifo capacities are
// multiples of every unit (ternaryFifoQuantum), so an element, a header or
// a group never straddles the wrap point and is always one contiguous read.
inline size_t alignUp(uint64_t pos, size_t a) { return static_cast<size_t>((a - pos % a) % a); }

void execute(const Step& s, const char* in, char* out, size_t off, size_t n,
             const Reduction& red, int nranks) {
  const char* loc = s.local ? s.local + off : nullptr;
  char* dst = s.dst ? s.dst + off : nullptr;
  if (s.reduce) {
    char* target = dst ? dst : out;
    reduceKernel(target, in, loc, n / ternTypeSize(red.dt), red.dt, red.op,
                 s.finalAvg ? nranks : 0);
    if (dst && out) memcpy(out, dst, n);
    return;
  }
  const char* src = in ? in : loc;
  if (out) memcpy(out, src, n);
  if (dst && dst != src) memcpy(dst, src, n);
}

// Where this step's message starts on each stream.
void layout(Program& p, const Step& s) {
  if (s.in) {
    uint64_t pos = s.in->recvPos();
    p.inSkip = alignUp(pos, s.codec ? 16 : 8);
    p.inHdr = s.codec ? sizeof(StepHeader) : 0;
    p.inSkip2 = s.codec ? alignUp(pos + p.inSkip + p.inHdr, s.inUnit) : 0;
  }
  if (s.out) {
    uint64_t pos = s.out->sendPos();
    p.outSkip = alignUp(pos, s.codec ? 16 : 8);
    p.outHdr = s.codec ? sizeof(StepHeader) : 0;
    p.outSkip2 = s.codec ? alignUp(pos + p.outSkip + p.outHdr, s.outUnit) : 0;
  }
  p.started = true;
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

// Padding and header before the payload.  Returns false while blocked.
ternResult_t prologue(Program& p, const Step& s, bool* ready) {
  if (s.in) {
    const char* ip;
    skipIn(s.in, &p.inSkip);
    if (p.inSkip == 0 && p.inHdr > 0 && s.in->recvAvail(&ip) >= sizeof(StepHeader)) {
      StepHeader h;
      memcpy(&h, ip, sizeof h);
      if (h.magic != kStepMagic || h.unit != s.inUnit || h.groups != s.bytes)
        return setError(ternRemoteError,
                        "malformed chunk header from rank " + std::to_string(s.in->peer) +
                            ": unit " + std::to_string(h.unit) + " bytes, " +
                            std::to_string(h.groups) + " groups; expected " +
                            std::to_string(s.inUnit) + " and " + std::to_string(s.bytes));
      s.in->recvConsume(sizeof h);
      p.inHdr = 0;
    }
    if (p.inSkip == 0 && p.inHdr == 0) skipIn(s.in, &p.inSkip2);
  }
  if (s.out) {
    char* op;
    padOut(s.out, &p.outSkip);
    if (p.outSkip == 0 && p.outHdr > 0 && s.out->sendSpace(&op) >= sizeof(StepHeader)) {
      StepHeader h{kStepMagic, s.outUnit, s.bytes};
      memcpy(op, &h, sizeof h);
      s.out->sendCommit(sizeof h);
      p.outHdr = 0;
    }
    if (p.outSkip == 0 && p.outHdr == 0) padOut(s.out, &p.outSkip2);
  }
  *ready = p.inSkip + p.inHdr + p.inSkip2 + p.outSkip + p.outHdr + p.outSkip2 == 0;
  return ternSuccess;
}

// Moves as much payload as the fifos allow; returns the units moved (bytes
// for dense steps, groups for codec steps).
size_t payload(Program& p, const Step& s, const Reduction& red, int nranks) {
  const char* in = nullptr;
  char* out = nullptr;
  size_t n = s.bytes - p.off;
  if (s.codec) {
    n = std::min(n, kBurst / s.outUnit + 1);
    if (s.in) n = std::min(n, s.in->recvAvail(&in) / s.inUnit);
    if (s.out) n = std::min(n, s.out->sendSpace(&out) / s.outUnit);
    if (n == 0) return 0;
    s.codec->run(in, out, p.off, n);
    if (s.in) s.in->recvConsume(n * s.inUnit);
    if (s.out) s.out->sendCommit(n * s.outUnit);
  } else {
    n = std::min(n, kBurst);
    if (s.in) n = std::min(n, s.in->recvAvail(&in));
    if (s.out) n = std::min(n, s.out->sendSpace(&out));
    n -= n % (s.reduce ? ternTypeSize(red.dt) : 1);  // whole elements only
    if (n == 0) return 0;
    execute(s, in, out, p.off, n, red, nranks);
    if (s.in) s.in->recvConsume(n);
    if (s.out) s.out->sendCommit(n);
  }
  p.off += n;
  return n;
}

// Advances one program as far as the fifos allow.  *done when finished.
ternResult_t advance(Program& p, const Reduction& red, int nranks, bool* moved, bool* done) {
  while (p.cur < p.steps.size()) {
    const Step& s = p.steps[p.cur];
    if (!p.started) layout(p, s);
    bool ready;
    TERN_CHECK(prologue(p, s, &ready));
    if (!ready) {
      *done = false;
      return ternSuccess;
    }
    while (p.off < s.bytes) {
      if (payload(p, s, red, nranks) == 0) {
        *done = false;
        return ternSuccess;
      }
      *moved = true;
    }
    ++p.cur;
    p.off = 0;
    p.started = false;
  }
  *done = true;
  return ternSuccess;
}

// A step blocked on a peer that has gone can never finish: that is the
// remote error (a peer that exits after its part is done is not one).
ternResult_t checkBlockedOnGone(const std::vector<Program>& progs, const Reduction& red,
                                int rank, const char* what) {
  for (const Program& p : progs) {
    if (p.cur >= p.steps.size()) continue;
    const Step& s = p.steps[p.cur];
    const char* ip;
    size_t unit = s.codec ? s.inUnit : s.reduce ? ternTypeSize(red.dt) : 1;
    bool starved = s.in && s.in->gone && s.in->recvAvail(&ip) < unit;
    Conn* dead = starved ? s.in : (s.out && s.out->gone) ? s.out : nullptr;
    if (dead)
      return setError(ternRemoteError, "rank " + std::to_string(rank) + " needs rank " +
                                           std::to_string(dead->peer) + " in " + what +
                                           ", but that rank exited or failed");
  }
  return ternSuccess;
}

std::string blockedPeers(const std::vector<Program>& progs) {
  std::set<int> peers;
  for (const Program& p : progs) {
    if (p.cur >= p.steps.size()) continue;
    const Step& s = p.steps[p.cur];
    if (s.in) peers.insert(s.in->peer);
    if (s.out) peers.insert(s.out->peer);
  }
  std::string out;
  for (int r : peers) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "-" : out;
}

// Backs off from spinning to yielding to sleeping in poll(), so ranks that
// outnumber cores still get the CPU they need.
void idleWait(unsigned idle, const std::vector<Conn*>& sockets, bool pollable) {
  if (idle < 64) {
    _mm_pause();
  } else if (idle < 4096) {
    sched_yield();
  } else if (!pollable) {  // shm only, or connections (ucx) that need pumping but have no fd
    usleep(sockets.empty() ? 50 : 5);
  } else {
    pollfd fds[64];
    int n = 0;
    for (Conn* c : sockets) {
      if (n == 64) break;
      fds[n++] = {c->pollFd(), static_cast<short>(POLLIN | (c->flushed() ? 0 : POLLOUT)), 0};
    }
    poll(fds, n, 1);
  }
}

}  // namespace

ternResult_t runPrograms(Comm& c, std::vector<Program>& progs, const Reduction& red,
                         const char* what) {
  std::vector<Conn*> sockets;  // connections that need pumping
  for (Program& p : progs) {
    p.cur = p.off = 0;
    p.started = false;
    for (const Step& s : p.steps)
      for (Conn* k : {s.in, s.out})
        if (k && k->needsProgress() && std::find(sockets.begin(), sockets.end(), k) == sockets.end())
          sockets.push_back(k);
  }
  const bool pollable = !sockets.empty() &&
                        std::all_of(sockets.begin(), sockets.end(),
                                    [](Conn* k) { return k->pollFd() >= 0; });
  unsigned idle = 0;
  Clock::time_point idleSince, nextHealth;
  for (;;) {
    bool moved = false, done = true;
    for (Conn* k : sockets) {
      bool m;
      TERN_CHECK(k->progress(&m));
      moved |= m;
    }
    for (Program& p : progs) {
      bool finished;
      TERN_CHECK(advance(p, red, c.nranks, &moved, &finished));
      done &= finished;
    }
    if (done) {
      bool flushed = true;
      for (Conn* k : sockets) flushed &= k->flushed();
      if (flushed) return ternSuccess;
    }
    if (moved) {
      idle = 0;
      continue;
    }
    if (c.aborted.load(std::memory_order_relaxed)) TERN_CHECK(c.checkHealth());
    if (idle == 0) {
      idleSince = Clock::now();
      nextHealth = idleSince + std::chrono::milliseconds(2);  // short waits stay syscall-free
    }
    if (++idle % 64 == 0) {
      auto now = Clock::now();
      if (now >= nextHealth) {  // dead peers, abort, earlier failure: every 20 ms
        TERN_CHECK(c.checkHealth());
        TERN_CHECK(checkBlockedOnGone(progs, red, c.rank, what));
        nextHealth = now + std::chrono::milliseconds(20);
      }
      double waited = std::chrono::duration<double>(now - idleSince).count();
      if (waited > c.cfg.timeoutSec)
        return setError(ternTimeout, "rank " + std::to_string(c.rank) + " made no progress in " +
                                         what + " for " + std::to_string((int)waited) +
                                         " s (TERN_TIMEOUT) waiting on rank(s) " +
                                         blockedPeers(progs) + ": dead or stalled peer?");
    }
    idleWait(idle, sockets, pollable);
  }
}

ternResult_t runProgram(Comm& c, Program& prog, const Reduction& red, const char* what) {
  std::vector<Program> one(1);
  one[0].steps.swap(prog.steps);
  ternResult_t r = runPrograms(c, one, red, what);
  prog.steps.swap(one[0].steps);
  return r;
}

}  // namespace tern
