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

// Every message on a stream starts 8-byte aligned, so an element never
// straddles the fifo's wrap point whatever the datatype.
inline size_t padOf(size_t bytes) { return (8 - bytes % 8) % 8; }

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

// Pads the streams after a step.  Returns false while blocked.
bool pad(Program& p, const Step& s) {
  size_t need = padOf(s.bytes);
  if (s.in && p.padIn < need) {
    const char* ip;
    size_t k = std::min(s.in->recvAvail(&ip), need - p.padIn);
    s.in->recvConsume(k);
    p.padIn += k;
  }
  if (s.out && p.padOut < need) {
    char* op;
    size_t k = std::min(s.out->sendSpace(&op), need - p.padOut);
    s.out->sendCommit(k);
    p.padOut += k;
  }
  return (!s.in || p.padIn == need) && (!s.out || p.padOut == need);
}

// Advances one program as far as the fifos allow.  Returns true when done.
bool advance(Program& p, const Reduction& red, int nranks, bool* moved) {
  size_t unitReduce = ternTypeSize(red.dt);
  while (p.cur < p.steps.size()) {
    const Step& s = p.steps[p.cur];
    if (p.off < s.bytes) {
      size_t n = std::min(s.bytes - p.off, kBurst);
      const char* in = nullptr;
      char* out = nullptr;
      if (s.in) n = std::min(n, s.in->recvAvail(&in));
      if (s.out) n = std::min(n, s.out->sendSpace(&out));
      n -= n % (s.reduce ? unitReduce : 1);
      if (n == 0) return false;
      execute(s, in, out, p.off, n, red, nranks);
      if (s.in) s.in->recvConsume(n);
      if (s.out) s.out->sendCommit(n);
      p.off += n;
      *moved = true;
      continue;
    }
    if (!pad(p, s)) return false;
    ++p.cur;
    p.off = p.padIn = p.padOut = 0;
  }
  return true;
}

// A step blocked on a peer that has gone can never finish: that is the
// remote error (a peer that exits after its part is done is not one).
ternResult_t checkBlockedOnGone(const std::vector<Program>& progs, const Reduction& red,
                                int rank, const char* what) {
  for (const Program& p : progs) {
    if (p.cur >= p.steps.size()) continue;
    const Step& s = p.steps[p.cur];
    const char* ip;
    bool starved = s.in && s.in->gone && s.in->recvAvail(&ip) < (s.reduce ? ternTypeSize(red.dt) : 1);
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
void idleWait(unsigned idle, const std::vector<Conn*>& sockets) {
  if (idle < 64) {
    _mm_pause();
  } else if (idle < 4096) {
    sched_yield();
  } else if (sockets.empty()) {
    usleep(50);
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
    p.cur = p.off = p.padIn = p.padOut = 0;
    for (const Step& s : p.steps)
      for (Conn* k : {s.in, s.out})
        if (k && k->pollFd() >= 0 && std::find(sockets.begin(), sockets.end(), k) == sockets.end())
          sockets.push_back(k);
  }
  unsigned idle = 0;
  Clock::time_point idleSince, nextHealth;
  for (;;) {
    bool moved = false, done = true;
    for (Conn* k : sockets) {
      bool m;
      TERN_CHECK(k->progress(&m));
      moved |= m;
    }
    for (Program& p : progs) done &= advance(p, red, c.nranks, &moved);
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
    idleWait(idle, sockets);
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
