// The connection table: the (peer, level) connections of a communicator,
// each made when first asked for (a plan naming it, a peer opening it:
// nothing per peer and level at creation but two null pointers) and opened
// on first use or whenever asked (connect), by the transport the registry
// picked for the peer.  The table owns the control socket to each
// peer it talks to, made when the first connection to that peer opens (by
// whichever end opens first; when both dial at once, the socket the higher
// rank dialled is kept), and frames it: a failure notice, a request to open
// a level, and the transports' own opening messages per (peer, level)
// travel on it without mixing.  It also owns this rank's listener, where
// peers dial the control sockets and lower ranks the tcp sockets of the
// levels they open.
//
// Opening runs on a thread per connection being opened (blocking, until
// TERN_TIMEOUT), never on the progress thread: the engine's step that first
// touches a connection waits for it (Conn::use) while every other step runs.
// Either end may start an opening, both at once included: each end sends one
// request per (peer, level) at most, and a request for a connection already
// opening is the same opening.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/gate.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace tern {

// What the communicator hands over once every rank's address is known.
struct TableSetup {
  int rank = 0, nranks = 0;
  const Config* cfg = nullptr;
  Secret secret{};
  std::vector<SockAddr> addrs;                   // every rank's listener
  int listenFd = -1;                             // this rank's listener, taken over
  std::unique_ptr<AuthGate> gate;                // its gate, taken over
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Transport*> transportOf;           // per peer, agreed by both ends
  FlowMark marks[TERN_PRIORITY_LEVELS];                       // each level's flow class and marking
  // A peer's failure notice: its code and sentence (called on any thread).
  std::function<void(int peer, ternResult_t code, const std::string& why)> onNotice;
};

class ConnTable : public ConnOpener {
 public:
  explicit ConnTable(TableSetup s);
  // Starts reading the control sockets (once whoever handles the notices
  // can be reached through the table).
  void start();
  // Stops the control thread and ends the openings under way (their peers
  // see the control socket close): after it no thread of the table calls
  // back into its owner.  Idempotent; the owner calls it before it lets go
  // of the table, whose callbacks may still reach for it until then.
  void quiesce();
  // quiesce(), then closes every connection.
  ~ConnTable() override;

  // The connections of a level, per peer (self included), as plans see them.
  const LevelConns& view(int level) const { return made_[level]; }
  // (peer, level)'s connection, made now if it was not.
  Conn* conn(int peer, int level) const { return made_[level].at(peer); }
  // ... or null if no one asked for it yet.
  Conn* connIfMade(int peer, int level) const { return made_[level].ifMade(peer); }
  // The connections made so far, of every level.
  std::vector<Conn*> connsMade() const;
  // ConnOpener: made on first ask.
  Conn* make(int peer, int level) override;
  // Starts opening (peer, level) now, if it is not open or opening.
  ternResult_t connect(int peer, int level);
  // ConnOpener: the engine's first use.
  ternResult_t request(Conn& c, bool* ready) override;
  // Connections to other ranks opened so far, and connection objects made
  // (self included; statistics, tests).
  int openedCount() const { return opened_.load(); }
  int madeCount() const;

  // Sends a failure notice to every peer it has a control socket to (best
  // effort: it never blocks).  A rank that receives a notice passes it on
  // once to its own control peers, so it reaches every rank joined to this
  // one by connections.
  void notifyAll(ternResult_t code, const std::string& why);
  // Reads what the control sockets hold now (notices first of all).
  void serviceControl();
  // Every connection is gone and the control sockets are shut down: peers
  // blocked on us fail fast.
  void shutDown();
  // The control socket to `peer`, made now if neither end has made it: this
  // rank dials (the peer's table answers whether it keeps that socket, or
  // keeps its own dial, which then arrives through the gate).  A peer that
  // exited (nothing listens), failed or is closing is ternRemoteError at
  // once; one that does not answer, ternTimeout at `d`.
  ternResult_t ensureControl(int peer, Deadline d);
  int controlFd(int peer) const { return ctlFd_[peer].load(); }  // -1: none yet
  int controlCount() const;  // control sockets made so far (tests, perf)

 private:
  struct Slot;
  Slot& slot(int peer, int level) {
    Slot* s = slots_[static_cast<size_t>(peer) * TERN_PRIORITY_LEVELS + level].load(std::memory_order_acquire);
    return s ? *s : makeSlot(peer, level);
  }
  Slot& makeSlot(int peer, int level);
  // Every slot made so far (a copy: more may be made meanwhile).
  std::vector<Slot*> slotsMade() const;
  ConnSetup setupFor(int peer, int level) const;
  void begin(Slot& s, bool announce);
  void runOpen(Slot& s, bool announce);
  void finish(Slot& s, ternResult_t r);
  void wake();
  ternResult_t sendFrame(int peer, int type, int level, const void* p, size_t n, Deadline d);
  void controlLoop();
  void readControl(int peer);
  void dispatch(int peer, int type, int level, const std::string& payload);
  ternResult_t dialPeer(int peer, char slot, Deadline d, int* fd,
                       const std::function<ternResult_t(int)>& more);
  ternResult_t dialControl(int peer, Deadline d, int* fd, char* verdict);
  void admitControl(Admitted& a);
  void adoptControl(int peer, int fd);
  void admitSockets();
  void takeLevelSocket(Admitted& a);
  void sendToControls(const std::string& frame, int except);
  void goDown();
  void peerClosed(int peer);

  int rank_, nranks_;
  const Config* cfg_;
  Secret secret_;
  std::vector<SockAddr> addrs_;
  FlowMark marks_[TERN_PRIORITY_LEVELS];
  std::vector<std::unique_ptr<Transport>> transports_;  // outlive the connections below
  std::vector<Transport*> transportOf_;                // per peer
  // Slots and their connections, made on first ask (makeSlot, under
  // makeMu_, which also guards owned_, gone_ and peerGone_); read without a lock.
  mutable std::mutex makeMu_;
  std::vector<std::unique_ptr<Slot>> owned_;
  std::unique_ptr<std::atomic<Slot*>[]> slots_;                     // [peer * TERN_PRIORITY_LEVELS + level]
  LevelConns made_[TERN_PRIORITY_LEVELS];  // [level].made[peer]: the slot's conn
  bool gone_ = false;  // shut down: connections made from now on are born gone
  std::vector<bool> peerGone_;  // per peer: its control socket closed (the same)
  std::function<void(int, ternResult_t, const std::string&)> onNotice_;

  // The control sockets (-1 until made; then fixed until the table goes).
  // serveMu_: one reader at a time (the control thread or a health check);
  // sendMu_[peer]: whole frames; ctlMu_: making them (dialing_, down_).
  std::unique_ptr<std::atomic<int>[]> ctlFd_;
  std::vector<bool> dialing_;  // this rank is dialling the peer
  std::vector<int> dialFds_;   // sockets being dialled, once connected (goDown ends them)
  bool down_ = false;          // failed or closing: no control socket is made any more
  std::mutex ctlMu_;
  std::condition_variable ctlCv_;
  // Held while a notice goes out and while shutDown closes the control
  // sockets: a failure heard meanwhile on another thread (a peer's notice)
  // cannot close a socket under a notice still on its way.
  std::mutex noticeMu_;
  bool noticed_ = false;  // under noticeMu_: a notice went out (sent or passed on) from here
  std::vector<std::unique_ptr<std::mutex>> sendMu_;
  std::vector<std::string> ctlIn_;
  std::vector<bool> ctlClosed_;
  std::mutex serveMu_;
  int lfd_;
  std::unique_ptr<AuthGate> gate_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> opening_{0}, opened_{0};
  std::mutex openingMu_;               // with openingCv_: quiesce waits for openings to end
  std::condition_variable openingCv_;
  std::thread ctl_;
};

}  // namespace tern
