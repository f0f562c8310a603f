// Rounds (rounds.h): one round over the levels, the priority hold, and the
// idle wait between rounds.
#include "engine/rounds.h"

#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>

#include "base/error.h"

namespace tern {

namespace {

// Payload bytes one program may move per visit.  Alone, an operation moves
// about one ring chunk (TERN_CHUNKSIZE's default) per round, so an operation
// issued meanwhile is admitted, and a caller asking for the drive token gets
// it, within one chunk; with more urgent work admitted it hands the CPU back
// after a small slice, which bounds how long an urgent operation waits for it.
constexpr size_t kBudgetAlone = 512 << 10;
constexpr size_t kBudgetYielding = 16 << 10;

// Whether an operation of a level is exchanging with its peers, so that its
// next bytes come at the link's pace: it has heard a peer's descriptor (the
// peer issued it too), or it only sends (its bytes are on the link whether
// or not the peer reads yet).  One that has sent its first bytes and waits
// for a peer that has not issued it moves nothing until that peer comes.
bool engaged(const Operation& o) { return !o.greetedIn.empty() || (o.send && !o.collective); }

bool engaged(const Levels::List& list) {
  return std::any_of(list.begin(), list.end(), [](const OpPtr& o) { return engaged(*o); });
}

// Whether a level holds less urgent ones back while it waits: an operation
// of it is engaged and does more than listen (stream receivers hold nobody).
bool holdsBack(const Levels::List& list) {
  return std::any_of(list.begin(), list.end(), [](const OpPtr& o) { return !o->phase.listening && engaged(*o); });
}

}  // namespace

Rounds::Rounds(double holdSec, Admission& admission, Levels& levels, Stepper& stepper, Health& health,
               Waits& waits, const DriveToken& token)
    : hold_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(holdSec))),
      admission_(admission),
      levels_(levels),
      stepper_(stepper),
      health_(health),
      waits_(waits),
      token_(token) {}

// While a more urgent level is busy (it moved less than hold_ ago), less
// urgent ones are held: that level is moving bytes right now and between its
// chunks waits only for the link or the next chunk from its peer, and bytes
// of ours would share that link.  Measured (perf/RESULTS.md, 2026-11-24): at
// 1 Gbit/s a bulk allreduce that filled in whenever the urgent one waited
// took half the link, and the urgent one took 2.1x its solo time; held, 1.05-1.16x.
// Once the urgent level has been quiet for hold_ less urgent work fills in
// again in small slices, so a peer blocked in our bulk operation still gets
// it done.  A move starts the hold only where the urgent level is engaged
// with its peers (above), and only an engaged level holds the others while
// it waits: an urgent allreduce that one rank has issued and its peer not yet
// sends its first bytes and then waits, and holding bulk then left the link
// idle, also for the rest of the hold a finished urgent allreduce had
// started (PriorityScheduler on ResNet-50's ~130 small urgent tensors per
// backward, which come one after the other: 1.12x plain DDP held, 1.16x
// with no hold at all; perf/RESULTS.md, 2026-12-04: PriorityScheduler near
// the ideal on an emulated accelerator, and 2026-12-05: the priority hold
// only behind an engaged level).
bool Rounds::round() {
  stepper_.admit();
  heldFrom_ = kLevels;
  bool urgentWaiting = false;  // a more urgent level has work (less urgent ones move in small slices)
  bool urgentEngaged = false;  // ... that it exchanges with its peers (less urgent ones are held)
  for (Levels::List& list : levels_) {
    if (list.empty()) continue;
    if (urgentEngaged && Clock::now() < heldUntil_) {
      heldFrom_ = levels_.levelOf(list);
      return false;
    }
    bool moved = false, pumped = false;
    if (!visit(list, urgentWaiting ? kBudgetYielding : kBudgetAlone, &moved, &pumped)) return true;
    list.erase(std::remove_if(list.begin(), list.end(), [](const OpPtr& o) { return o->done.load(); }),
               list.end());
    if (moved || pumped) {  // serve the most urgent levels again first
      health_.busyRound();
      if (moved && levels_.anyActiveBelow(list) && engaged(list)) heldUntil_ = Clock::now() + hold_;
      return true;
    }
    urgentWaiting |= std::any_of(list.begin(), list.end(), [](const OpPtr& o) { return !o->phase.listening; });
    urgentEngaged |= holdsBack(list);
  }
  return false;
}

// Steps every runnable operation of one level; false when one failed (and
// with it every admitted operation: the lists are cleared).
bool Rounds::visit(Levels::List& list, size_t budget, bool* moved, bool* pumped) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (!levels_.runnable(list, i)) continue;
    Operation& op = *list[i];
    bool m = false, finished = false;
    ternResult_t r = op.unbound() ? levels_.bindSource(list, i, &m) : ternSuccess;
    if (r == ternSuccess && !op.unbound() && !op.draining) r = stepper_.step(op, budget, &m, pumped, &finished);
    if (r == ternSuccess && (finished || op.draining)) finished = stepper_.settled(op, &r);
    if (r != ternSuccess) {
      stepper_.failAll(r, lastThreadError());
      return false;
    }
    if (finished) stepper_.complete(op, ternSuccess, std::string());
    *moved |= m || finished;
  }
  return true;
}

// Ranks that outnumber cores still get the CPU they need.  The doorbell
// ends the sleep when a more urgent caller wants the token or new work
// arrives.
void Rounds::idleWait(unsigned& idle, const Operation* op) {
  constexpr unsigned kYield = 4096;
  // Held back by the priority hold, with every connection a socket: the
  // urgent level waits on the network, so spinning or yielding gains
  // nothing the poll's wake-up would not (and at 4 ranks on 2 cores the
  // spins of every hold cost tac ~50 ms of CPU per iteration).
  if (heldFrom_ < kLevels && idle < kYield && levels_.pumpsPollable()) idle = kYield;
  if (idle < kSpinPauses) {
    _mm_pause();
    return;
  }
  if (idle < kYield) {
    const uint64_t before = __rdtsc();  // cheaper than the clock: this is the wait's inner loop
    sched_yield();
    // A yield that gave the core away means other threads want it (a
    // training step's compute beside its gradients' transfers, on as many
    // cores as ranks).  Where the wait is on sockets, yielding on gains
    // nothing the kernel's wake-up would not give, and every return to this
    // thread costs them a switch: sleep in poll from now on, until the next
    // move.  A wait on shared memory keeps yielding: it has nothing to sleep
    // on, and a peer rank may be the thread it yields to.
    // 60k cycles: 15-30 us at the clock rates of today's x86 servers.
    if (__rdtsc() - before < 60000 || !levels_.pumpsPollable()) return;
    idle = kYield;
  }
  poll(op);
}

// Sleeps in poll() on the sockets of the levels not held back.
void Rounds::poll(const Operation* op) {
  pollfd fds[65];
  int n = 0;
  if (waits_.bell() >= 0) fds[n++] = {waits_.bell(), POLLIN, 0};
  bool pollable = true, any = false;
  long recheckNs = 1000000;  // a connection capped at its bulk bound looks again sooner
  // Levels the hold keeps back are not polled: their sockets stay writable
  // while they wait, and a poll that returned at once for them spun the
  // driver through the whole hold (a 4-host training step on 2 cores spent
  // ~20% more CPU per iteration, measured in perf/RESULTS.md, 2026-11-29:
  // priorities at 4 hosts on 2 cores, where the CPU went).
  // The hold's end wakes the poll instead.
  for (int level = 0; level < heldFrom_; ++level)
    for (OpPtr& o : levels_[level])
      for (Conn* c : o->pumps) {
        any = true;
        const bool writable = c->wantsWritable();
        if (long ns = c->cappedRecheckNs(); ns > 0) recheckNs = std::min(recheckNs, ns);
        if (c->pollFd() < 0) pollable = false;
        else if (n < 65)
          fds[n++] = {c->pollFd(), static_cast<short>(POLLIN | (writable ? POLLOUT : 0)), 0};
      }
  if (!any || !pollable) {
    usleep(any ? 5 : 50);
    return;
  }
  // A connection holding bytes back at its kernel-queue bound gets no event
  // when the queue drains: look again when it says (at 10 Gbit/s the 256 KiB
  // bound drains in 0.2 ms; a millisecond's sleep left the link idle,
  // measured: a 4-rank bulk allreduce 1.4x slower).  Unstaged sends too (the
  // test once asked whether staged bytes waited, and a capped unstaged step
  // has none).
  timespec wait{0, recheckNs};
  if (heldFrom_ < kLevels) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(heldUntil_ - Clock::now()).count();
    wait.tv_nsec = std::max<long>(0, std::min<long>(wait.tv_nsec, left));
  }
  waits_.polling(true);
  if (!admission_.anyPending() && !token_.wanted(op)) ppoll(fds, n, &wait, nullptr);
  waits_.polling(false);
  if (waits_.bell() >= 0 && fds[0].revents) waits_.answerBell();
}

}  // namespace tern
