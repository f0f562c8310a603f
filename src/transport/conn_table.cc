#include "transport/conn_table.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_name.h"

namespace tern {

namespace {

// Every message on a control socket after the mesh is formed.
struct Frame {
  uint32_t magic;
  uint16_t type;
  uint16_t level;
  uint32_t len;  // payload bytes that follow
};
constexpr uint32_t kFrameMagic = 0x4e544346;  // "FCTN"
constexpr uint32_t kMaxPayload = 1 << 20;     // a UCX worker address is the largest
// The one byte a table answers a control socket's dialler with.
enum Verdict : char {
  kKept = 'K',   // this socket is the pair's control socket
  kLoses = 'L',  // the pair has one, or the answering (higher) rank's own dial wins
  kDown = 'D',   // the answering rank failed or is closing
};
enum FrameType : uint16_t {
  kNotice = 1,  // payload: uint32 code, then the sentence (why this rank failed)
  kOpen = 2,    // open (peer, level): the sender's end is opening
  kData = 3,    // a transport's opening message for (peer, level)
};

std::string frame(uint16_t type, int level, const void* p, size_t n) {
  Frame h{kFrameMagic, type, static_cast<uint16_t>(level), static_cast<uint32_t>(n)};
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  out.append(static_cast<const char*>(p), n);
  return out;
}

}  // namespace

// A (peer, level): its connection, and its share of the control socket
// while it opens (what the peer sent for it; the socket it dialled).
struct ConnTable::Slot : Channel {
  ConnTable* table = nullptr;
  int peer = 0, level = 0;
  std::unique_ptr<Conn> conn;
  std::mutex mu;
  std::condition_variable cv;
  std::string in;        // opening messages from the peer, not yet read
  int fd = -1;           // tcp: the socket the peer dialled, until open() takes it
  bool closed = false;   // the control socket closed, or the table stops
  std::string error;     // why opening failed (written before openState = kFailed)
  ternResult_t code = ternSuccess;

  ~Slot() override { closeFd(fd); }

  ternResult_t send(const void* p, size_t n, Deadline d) override {
    return table->sendFrame(peer, kData, level, p, n, d);
  }

  // Waits for `ready` (under mu) until d; the failure says what was awaited.
  template <class Ready>
  ternResult_t await(Deadline d, Ready ready, std::unique_lock<std::mutex>& lk) {
    if (cv.wait_until(lk, d, [&] { return ready() || closed; }) && ready()) return ternSuccess;
    if (closed)
      return setError(ternRemoteError, "rank " + std::to_string(peer) +
                                           " closed its control connection while the connection "
                                           "at level " + std::to_string(level) + " was opening");
    return setError(ternTimeout, "rank " + std::to_string(peer) + " did not answer within "
                                     "TERN_TIMEOUT while the connection at level " +
                                     std::to_string(level) + " was opening: dead or stalled peer?");
  }

  ternResult_t recv(void* p, size_t n, Deadline d) override {
    std::unique_lock<std::mutex> lk(mu);
    TERN_CHECK(await(d, [&] { return in.size() >= n; }, lk));
    memcpy(p, in.data(), n);
    in.erase(0, n);
    return ternSuccess;
  }

  ternResult_t dial(Deadline d, int* out) override {
    return table->dialPeer(peer, static_cast<char>(1 + level), d, out, nullptr);
  }

  // A peer may dial, send and exit before its socket is through our gate:
  // once its control socket has closed, what it dialled before still gets
  // the gate's handshake time to arrive.
  ternResult_t accepted(Deadline d, int* out) override {
    std::unique_lock<std::mutex> lk(mu);
    auto have = [&] { return fd >= 0; };
    if (!cv.wait_until(lk, d, [&] { return have() || closed; }) || !have())
      cv.wait_until(lk, std::min(d, deadlineAfter(table->cfg_->handshakeSec)), have);
    TERN_CHECK(await(Clock::now(), have, lk));
    *out = fd;
    fd = -1;
    return ternSuccess;
  }

  void close() {
    {
      std::lock_guard<std::mutex> lk(mu);
      closed = true;
    }
    cv.notify_all();
  }
};

ConnTable::ConnTable(TableSetup s)
    : rank_(s.rank), nranks_(s.nranks), cfg_(s.cfg), secret_(s.secret), addrs_(std::move(s.addrs)),
      transports_(std::move(s.transports)), onNotice_(std::move(s.onNotice)),
      ctlFd_(new std::atomic<int>[s.nranks]), lfd_(s.listenFd), gate_(std::move(s.gate)) {
  std::copy(std::begin(s.marks), std::end(s.marks), marks_);
  for (int p = 0; p < nranks_; ++p) ctlFd_[p] = -1;
  dialing_.assign(nranks_, false);
  for (int p = 0; p < nranks_; ++p) sendMu_.push_back(std::make_unique<std::mutex>());
  ctlIn_.assign(nranks_, std::string());
  ctlClosed_.assign(nranks_, false);
  peerGone_.assign(nranks_, false);
  transportOf_ = std::move(s.transportOf);
  slots_.reset(new std::atomic<Slot*>[static_cast<size_t>(nranks_) * TERN_PRIORITY_LEVELS]);
  for (size_t i = 0; i < static_cast<size_t>(nranks_) * TERN_PRIORITY_LEVELS; ++i) slots_[i] = nullptr;
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level) {
    made_[level].made.reset(new std::atomic<Conn*>[nranks_]);
    for (int p = 0; p < nranks_; ++p) made_[level].made[p] = nullptr;
    made_[level].maker = this;
    made_[level].level = level;
  }
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
}

// The slot and its unopened connection (the transport's object: no socket,
// segment, endpoint or memory yet), published for readers without a lock.
ConnTable::Slot& ConnTable::makeSlot(int peer, int level) {
  std::lock_guard<std::mutex> lk(makeMu_);
  std::atomic<Slot*>& at = slots_[static_cast<size_t>(peer) * TERN_PRIORITY_LEVELS + level];
  if (Slot* s = at.load(std::memory_order_relaxed)) return *s;
  auto sl = std::make_unique<Slot>();
  sl->table = this;
  sl->peer = peer;
  sl->level = level;
  sl->conn = transportOf_[peer]->make(setupFor(peer, level));
  sl->conn->peer = peer;
  sl->conn->level = level;
  sl->conn->flowClass = marks_[level].flowClass;
  sl->conn->opener = this;
  sl->conn->gone = gone_ || peerGone_[peer];
  sl->closed = stop_.load() || sl->conn->gone;
  Slot* s = sl.get();
  owned_.push_back(std::move(sl));
  made_[level].made[peer].store(s->conn.get(), std::memory_order_release);
  at.store(s, std::memory_order_release);
  return *s;
}

Conn* ConnTable::make(int peer, int level) { return slot(peer, level).conn.get(); }

Conn* LevelConns::makeNow(int peer) const { return maker->make(peer, level); }

std::vector<ConnTable::Slot*> ConnTable::slotsMade() const {
  std::lock_guard<std::mutex> lk(makeMu_);
  std::vector<Slot*> out;
  for (const auto& s : owned_) out.push_back(s.get());
  return out;
}

std::vector<Conn*> ConnTable::connsMade() const {
  std::vector<Conn*> out;
  for (Slot* s : slotsMade()) out.push_back(s->conn.get());
  return out;
}

int ConnTable::madeCount() const {
  std::lock_guard<std::mutex> lk(makeMu_);
  return static_cast<int>(owned_.size());
}

void ConnTable::start() { ctl_ = std::thread(&ConnTable::controlLoop, this); }

void ConnTable::quiesce() {
  goDown();
  stop_ = true;
  wake();
  if (ctl_.joinable()) ctl_.join();
  for (Slot* s : slotsMade()) s->close();
  std::unique_lock<std::mutex> lk(openingMu_);
  openingCv_.wait(lk, [this] { return opening_.load() == 0; });
}

ConnTable::~ConnTable() {
  quiesce();
  for (int p = 0; p < nranks_; ++p) {
    int fd = ctlFd_[p].exchange(-1);
    closeFd(fd);
  }
  gate_.reset();  // drops handshakes under way; the listener is ours to close
  closeFd(lfd_);
  closeFd(wake_[0]);
  closeFd(wake_[1]);
}

ConnSetup ConnTable::setupFor(int peer, int level) const {
  return ConnSetup{rank_, peer, level, cfg_, Deadline{}, marks_[level], nullptr};
}

ternResult_t ConnTable::connect(int peer, int level) {
  if (peer < 0 || peer >= nranks_ || level < 0 || level >= TERN_PRIORITY_LEVELS)
    return setError(ternInvalidArgument, "no connection to rank " + std::to_string(peer) +
                                             " at level " + std::to_string(level));
  bool ready;
  return request(*conn(peer, level), &ready);
}

ternResult_t ConnTable::request(Conn& c, bool* ready) {
  Slot& s = slot(c.peer, c.level);
  int st = c.openState.load(std::memory_order_acquire);
  if (st == Conn::kUnopened) {
    if (c.gone)
      return setError(ternRemoteError, "rank " + std::to_string(c.peer) +
                                           " exited or failed before the connection at level " +
                                           std::to_string(c.level) + " was opened");
    begin(s, true);
    st = c.openState.load(std::memory_order_acquire);
  }
  *ready = st == Conn::kOpen;
  if (st == Conn::kFailed) return setError(s.code, s.error);
  return ternSuccess;
}

void ConnTable::begin(Slot& s, bool announce) {
  int expected = Conn::kUnopened;
  if (!s.conn->openState.compare_exchange_strong(expected, Conn::kOpening)) return;
  if (s.peer == rank_) {  // a loop in this process: nothing to agree on
    finish(s, s.conn->activate());
    return;
  }
  opening_.fetch_add(1);
  wake();  // the control thread serves the gate's handshakes more often now
  // Detached, counted in opening_ (quiesce waits for none to be left): a
  // process that exits without destroying its communicator (a peer died)
  // leaves no finished thread unjoined behind.
  std::thread(&ConnTable::runOpen, this, std::ref(s), announce).detach();
}

void ConnTable::runOpen(Slot& s, bool announce) {
  setLogRank(rank_);
  nameThisThread("tern-open");
  ConnSetup cs = setupFor(s.peer, s.level);
  cs.deadline = deadlineAfter(cfg_->timeoutSec);
  cs.ch = &s;
  // The peer asked (announce false) over the control socket; else it may be
  // this pair's first connection, and the control socket comes first.
  ternResult_t r = announce ? ensureControl(s.peer, cs.deadline) : ternSuccess;
  if (r == ternSuccess && announce) r = sendFrame(s.peer, kOpen, s.level, nullptr, 0, cs.deadline);
  if (r == ternSuccess) r = s.conn->open(cs);
  if (r == ternSuccess) r = s.conn->activate();
  finish(s, r);
  std::lock_guard<std::mutex> lk(openingMu_);  // the last touch of the table
  opening_.fetch_sub(1);
  openingCv_.notify_all();
}

void ConnTable::finish(Slot& s, ternResult_t r) {
  if (r != ternSuccess) {  // the operations waiting for it report it (Conn::use)
    s.code = r == ternTimeout ? ternTimeout : ternRemoteError;
    s.error = "cannot open the " + std::string(s.conn->name()) + " connection to rank " +
              std::to_string(s.peer) + " at level " + std::to_string(s.level) + ": " +
              lastThreadError();
    s.conn->openState.store(Conn::kFailed, std::memory_order_release);
    return;
  }
  if (s.peer != rank_) {
    opened_.fetch_add(1);
    TERN_LOG(Info, "opened the %s connection to rank %d at level %d (flow class %d)",
             s.conn->name(), s.peer, s.level, marks_[s.level].flowClass);
  }
  s.conn->settle();
  s.conn->openState.store(Conn::kOpen, std::memory_order_release);
}

ternResult_t ConnTable::sendFrame(int peer, int type, int level, const void* p, size_t n,
                                  Deadline d) {
  const std::string f = frame(static_cast<uint16_t>(type), level, p, n);
  std::lock_guard<std::mutex> lk(*sendMu_[peer]);
  return sendAll(ctlFd_[peer].load(), f.data(), f.size(), d);
}

void ConnTable::sendToControls(const std::string& f, int except) {
  for (int p = 0; p < nranks_; ++p) {
    const int fd = ctlFd_[p].load();
    if (fd < 0 || p == except) continue;
    std::lock_guard<std::mutex> lk(*sendMu_[p]);
    (void)!::send(fd, f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void ConnTable::notifyAll(ternResult_t code, const std::string& why) {
  std::string payload(4, '\0');
  const uint32_t c = static_cast<uint32_t>(code);
  memcpy(&payload[0], &c, 4);
  payload += why.substr(0, kMaxPayload - 4);
  std::lock_guard<std::mutex> lk(noticeMu_);
  noticed_ = true;
  TERN_LOG(Info, "telling the %d ranks with a control connection why this one failed", controlCount());
  sendToControls(frame(kNotice, 0, payload.data(), payload.size()), -1);
}

void ConnTable::shutDown() {
  {  // nothing more goes out: no graceful close
    std::lock_guard<std::mutex> lk(makeMu_);
    gone_ = true;
    for (auto& s : owned_) s->conn->gone = true;
  }
  goDown();
  // After a notice under way on another thread (a mismatch seen there while
  // this one heard a peer's): once every notice was sent, the sockets close.
  // Closing under it lost the notice to a rank that heard of the failure
  // from no one else and blamed the gone peer instead (3 ranks under
  // ThreadSanitizer, four runs at once: 11 failed in 216; 0 in 96 since;
  // 2026-12-05).
  std::lock_guard<std::mutex> lk(noticeMu_);
  for (int p = 0; p < nranks_; ++p)
    if (ctlFd_[p] >= 0) shutdown(ctlFd_[p], SHUT_RDWR);
}

// No control socket is made from now on; dials under way end now (a peer
// that stalls mid-handshake would hold them until their deadline), so a
// failing or closing communicator never waits on them.
void ConnTable::goDown() {
  {
    std::lock_guard<std::mutex> lk(ctlMu_);
    down_ = true;
    for (int fd : dialFds_) shutdown(fd, SHUT_RDWR);
  }
  ctlCv_.notify_all();
}

void ConnTable::wake() {
  const char b = 1;
  if (wake_[1] >= 0) (void)!write(wake_[1], &b, 1);
}

// Polled even when a data connection saw the peer go: a notice it sent
// before closing must still be read.
void ConnTable::serviceControl() {
  std::lock_guard<std::mutex> lk(serveMu_);
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (int p = 0; p < nranks_; ++p) {
    const int fd = ctlFd_[p].load();
    if (fd < 0 || ctlClosed_[p]) continue;
    fds.push_back({fd, POLLIN, 0});
    who.push_back(p);
  }
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents) readControl(who[i]);
}

void ConnTable::readControl(int p) {
  char buf[4096];
  bool closed = false;
  for (;;) {
    ssize_t k = ::recv(ctlFd_[p].load(), buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      ctlIn_[p].append(buf, static_cast<size_t>(k));
      continue;
    }
    closed = !(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    break;
  }
  std::string& in = ctlIn_[p];
  size_t off = 0;
  Frame h;
  while (in.size() - off >= sizeof h) {
    memcpy(&h, in.data() + off, sizeof h);
    if (h.magic != kFrameMagic || h.len > kMaxPayload || h.level >= TERN_PRIORITY_LEVELS) {
      TERN_LOG(Warn, "rank %d sent a malformed control message: its control connection is dropped", p);
      off = in.size();
      closed = true;
      break;
    }
    if (in.size() - off < sizeof h + h.len) break;
    dispatch(p, h.type, h.level, in.substr(off + sizeof h, h.len));
    off += sizeof h + h.len;
  }
  in.erase(0, off);
  if (closed) peerClosed(p);
}

void ConnTable::dispatch(int peer, int type, int level, const std::string& payload) {
  Slot& s = slot(peer, level);
  if (type == kNotice && payload.size() >= 4) {
    uint32_t code;
    memcpy(&code, payload.data(), 4);
    TERN_LOG(Info, "rank %d says the communicator failed: %s", peer, payload.substr(4).c_str());
    {  // passed on before our own failure closes our control sockets
      std::lock_guard<std::mutex> lk(noticeMu_);
      if (!std::exchange(noticed_, true))
        sendToControls(frame(kNotice, 0, payload.data(), payload.size()), peer);
    }
    if (onNotice_) onNotice_(peer, static_cast<ternResult_t>(code), payload.substr(4));
  } else if (type == kOpen) {
    begin(s, false);
  } else if (type == kData) {
    {
      std::lock_guard<std::mutex> lk(s.mu);
      s.in += payload;
    }
    s.cv.notify_all();
  }
}

// The peer exited or failed: its connections are gone (what it sent before
// stays readable) and its openings end now.
void ConnTable::peerClosed(int p) {
  TERN_LOG(Info, "rank %d closed its control connection: its connections are gone", p);
  ctlClosed_[p] = true;
  {
    std::lock_guard<std::mutex> lk(makeMu_);
    peerGone_[p] = true;  // made from now on: born gone
  }
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level) {
    if (Conn* c = connIfMade(p, level)) {
      Slot& s = slot(p, level);
      c->gone = true;
      s.close();
    }
  }
}

// A lower rank dialled the socket of a level it opens with us.
void ConnTable::takeLevelSocket(Admitted& a) {
  const int level = a.trailer.empty() ? -1 : static_cast<unsigned char>(a.trailer[0]) - 1;
  if (a.rank < 0 || a.rank >= rank_ || level < 0 || level >= TERN_PRIORITY_LEVELS) {
    gate_->refuse(a, "unexpected rank " + std::to_string(a.rank) + " or level " + std::to_string(level));
    return;
  }
  Slot& s = slot(a.rank, level);
  std::unique_lock<std::mutex> lk(s.mu);
  if (s.fd >= 0 || s.conn->openState.load() != Conn::kOpening) {
    lk.unlock();
    gate_->refuse(a, "a socket for level " + std::to_string(level) + " that is not opening");
    return;
  }
  s.fd = a.fd;
  lk.unlock();
  s.cv.notify_all();
}

void ConnTable::admitSockets() {
  Admitted a;
  // Serves the handshakes' bytes that are there, without waiting: the
  // control thread's poll wakes on each handshake's socket (addPollFds), and
  // control frames waited behind a 1 ms wait here on every wake-up while a
  // handshake was under way.
  while (gate_->tryNext(Clock::now(), &a)) {
    if (!a.trailer.empty() && a.trailer[0] == 0)
      admitControl(a);
    else
      takeLevelSocket(a);
  }
}

int ConnTable::controlCount() const {
  int n = 0;
  for (int p = 0; p < nranks_; ++p) n += ctlFd_[p].load() >= 0;
  return n;
}

// Under ctlMu_.  Control traffic travels in the most urgent class (as
// NCCL_IB_FIFO_TC does for NCCL's fifo): a failure notice must not queue
// behind bulk data.
void ConnTable::adoptControl(int peer, int fd) {
  if (markSocket(fd, marks_[0].dscp, marks_[0].soPriority) != ternSuccess)
    TERN_LOG(Warn, "could not mark the control socket to rank %d: %s", peer, lastThreadError().c_str());
  ctlFd_[peer].store(fd);
  TERN_LOG(Info, "control connection to rank %d made", peer);
  wake();  // the control thread reads it from now on
}

// A peer dialled its control socket to us.  We keep it unless we have one
// or our own dial to that peer is under way and ours wins (we are the
// higher rank); the peer's table applies the same rule to our dial, so one
// socket is kept per pair whatever the timing.
void ConnTable::admitControl(Admitted& a) {
  if (a.rank < 0 || a.rank >= nranks_ || a.rank == rank_) {
    gate_->refuse(a, "a control socket from unexpected rank " + std::to_string(a.rank));
    return;
  }
  bool kept = false;
  {
    std::lock_guard<std::mutex> lk(ctlMu_);
    const char v = down_ ? kDown
                   : ctlFd_[a.rank] >= 0 || (dialing_[a.rank] && a.rank < rank_) ? kLoses
                                                                                   : kKept;
    // One byte into a fresh socket's empty send buffer: it goes at once.
    kept = ::send(a.fd, &v, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1 && v == kKept;
    if (kept) adoptControl(a.rank, a.fd);
  }
  if (!kept) closeFd(a.fd);
  ctlCv_.notify_all();
}

// Every socket this rank dials to a peer's listener goes through here:
// connect, prove the job secret, name the slot (0: the control socket; a
// level's tcp socket: 1 + level), then `more` (the control socket's
// verdict).  Until it returns, the socket is in dialFds_, so that goDown
// ends the dial at once: a peer that stalls after its kernel accepted the
// connection would otherwise hold it, and a closing communicator, until d.
ternResult_t ConnTable::dialPeer(int peer, char slot, Deadline d, int* fd,
                                 const std::function<ternResult_t(int)>& more) {
  TERN_CHECK(connectBefore(addrs_[peer], d, fd, /*retryRefused=*/slot != 0));
  {
    std::lock_guard<std::mutex> lk(ctlMu_);
    if (down_) {  // went down while connecting: goDown could not reach this socket
      closeFd(*fd);
      return setError(ternRemoteError, "this communicator failed or is closing");
    }
    dialFds_.push_back(*fd);
  }
  ternResult_t r = authConnect(*fd, secret_, ConnKind::Mesh, rank_, d);
  if (r == ternSuccess) r = sendAll(*fd, &slot, 1, d);
  if (r == ternSuccess && more) r = more(*fd);
  {
    std::lock_guard<std::mutex> lk(ctlMu_);
    dialFds_.erase(std::find(dialFds_.begin(), dialFds_.end(), *fd));
  }
  if (r != ternSuccess) closeFd(*fd);
  return r;
}

ternResult_t ConnTable::dialControl(int peer, Deadline d, int* fd, char* verdict) {
  return dialPeer(peer, 0, d, fd, [&](int s) { return recvAll(s, verdict, 1, d); });
}

ternResult_t ConnTable::ensureControl(int peer, Deadline d) {
  const std::string who = "rank " + std::to_string(peer);
  std::unique_lock<std::mutex> lk(ctlMu_);
  auto made = [&] { return ctlFd_[peer].load() >= 0; };
  // Another opening of ours may be dialling already: its socket is ours too.
  ctlCv_.wait_until(lk, d, [&] { return made() || !dialing_[peer] || down_; });
  if (!made() && !down_ && !dialing_[peer]) {
    dialing_[peer] = true;
    lk.unlock();
    int fd = -1;
    char v = 0;
    ternResult_t r = dialControl(peer, d, &fd, &v);
    lk.lock();
    dialing_[peer] = false;
    if (r == ternSuccess && v == kKept && !made() && !down_) adoptControl(peer, fd);
    else closeFd(fd);
    ctlCv_.notify_all();
    if (r != ternSuccess)
      return setError(r == ternTimeout ? ternTimeout : ternRemoteError,
                      "cannot make the control connection to " + who + " (exited?): " + lastThreadError());
    if (v == kDown) return setError(ternRemoteError, who + " has failed or is destroying its communicator");
    // kLoses: the pair's socket is the one the peer dialled; it comes through our gate.
    ctlCv_.wait_until(lk, d, [&] { return made() || down_; });
  }
  if (made()) return ternSuccess;
  if (down_) return setError(ternRemoteError, "this communicator failed or is closing: no new control "
                                              "connection to " + who);
  return setError(ternTimeout, who + " did not make its control connection with this rank within "
                               "TERN_TIMEOUT: dead or stalled peer?");
}

// Reads the control sockets as messages arrive (a notice, a peer opening a
// level with us, its opening messages) and admits the level sockets lower
// ranks dial.  While openings are under way it wakes every few milliseconds
// so that the gate's handshakes (their sockets are the gate's) move on;
// otherwise it sleeps until a socket or the table wakes it (an idle
// communicator costs no wake-ups; a stranger's handshake waits for the next
// event, holding one socket, at most the gate's 256).
void ConnTable::controlLoop() {
  setLogRank(rank_);
  nameThisThread("tern-control");
  while (!stop_.load()) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {lfd_, POLLIN, 0}};
    const bool handshaking = gate_->addPollFds(&fds);
    {
      std::lock_guard<std::mutex> lk(serveMu_);  // ctlClosed_ changes under it
      for (int p = 0; p < nranks_; ++p) {
        const int fd = ctlFd_[p].load();
        if (fd >= 0 && !ctlClosed_[p]) fds.push_back({fd, POLLIN, 0});
      }
    }
    // Handshakes are served as their bytes come; a stranger's is dropped at
    // its deadline, which a wake-up now and then checks.
    const bool opening = opening_.load() > 0;
    if (poll(fds.data(), fds.size(), opening ? 5 : handshaking ? 50 : -1) < 0 && errno != EINTR) break;
    char drain[64];
    if (fds[0].revents) (void)!read(wake_[0], drain, sizeof drain);
    serviceControl();
    // A handshake's bytes need no test of their own: while any is under way
    // the gate is served on every wake-up.
    if (fds[1].revents || opening || handshaking) admitSockets();
  }
}

}  // namespace tern
