// Communicator creation and teardown:
//   1. listen on the chosen interface (TERN_SOCKET_IFNAME),
//   2. swap addresses with everyone through the bootstrap root,
//   3. build an authenticated full mesh of control sockets (connect to lower
//      ranks, accept from higher ones through the gate: concurrent handshakes,
//      strangers dropped and logged with a count),
//   4. pick a transport per peer and set up one connection per level over
//      the control socket (tcp pairs: one more socket per level, made then),
//   5. start the executor.
#include "comm/comm.h"

#include "topology/rdma.h"
#include "topology/topology.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/config.h"
#include "engine/trace.h"
#include "base/error.h"
#include "base/gate.h"
#include "transport/registry.h"
#include "base/log.h"

namespace tern {

namespace {

// Sockets per peer pair: slot 0 is the control socket, slot 1 + L the data
// socket of level L (made only for pairs that talk tcp).  The lower rank
// accepts, the higher one connects and names the slot after authenticating.
constexpr int kSlots = 1 + kLevels;

struct Mesh {
  AuthGate& gate;  // the listener: concurrent handshakes, strangers dropped (base/gate.h)
  Deadline d;
  std::vector<int> dataFd[kLevels];  // [level][peer], until a tcp connection owns it
};

int& slotFd(Comm& c, Mesh& m, int peer, int slot) {
  return slot == 0 ? c.meshFd[peer] : m.dataFd[slot - 1][peer];
}

ternResult_t connectSlots(Comm& c, Mesh& m, int p, char first, char last) {
  for (char slot = first; slot <= last; ++slot) {
    int fd;
    TERN_CHECK(connectBefore(c.peers[p].sockAddr(), m.d, &fd));
    slotFd(c, m, p, slot) = fd;
    TERN_CHECK(authConnect(fd, c.secret, ConnKind::Mesh, c.rank, m.d));
    TERN_CHECK(sendAll(fd, &slot, 1, m.d));
  }
  return ternSuccess;
}

// Accepts until `have()`; every authenticated socket goes to its slot
// (a peer further on may already be connecting data sockets for its own
// turn: they wait in their slots).  One gate serves the whole set-up, so a
// handshake under way between two calls is not lost.
template <class Have>
ternResult_t acceptUntil(Comm& c, Mesh& m, Have have) {
  while (!have()) {
    Admitted a;
    TERN_CHECK(m.gate.next(m.d, &a));
    int slot = static_cast<unsigned char>(a.trailer[0]);
    if (a.rank <= c.rank || a.rank >= c.nranks || slot >= kSlots ||
        slotFd(c, m, a.rank, slot) >= 0) {
      m.gate.refuse(a, "unexpected rank " + std::to_string(a.rank) + " or socket " +
                           std::to_string(slot));
      continue;
    }
    slotFd(c, m, a.rank, slot) = a.fd;
  }
  return ternSuccess;
}

// The control sockets: connect to lower ranks, accept from higher ones.
ternResult_t formMesh(Comm& c, Mesh& m) {
  c.meshFd.assign(c.nranks, -1);
  for (auto& v : m.dataFd) v.assign(c.nranks, -1);
  for (int p = 0; p < c.rank; ++p) TERN_CHECK(connectSlots(c, m, p, 0, 0));
  TERN_CHECK(acceptUntil(c, m, [&] {
    for (int p = c.rank + 1; p < c.nranks; ++p)
      if (c.meshFd[p] < 0) return false;
    return true;
  }));
  // Control traffic travels in the most urgent class (as NCCL_IB_FIFO_TC
  // does for NCCL's fifo): a failure notice must not queue behind bulk data.
  const FlowMark urgent = flowMarkOf(c.cfg, 0);
  for (int fd : c.meshFd)
    if (fd >= 0) TERN_CHECK(markSocket(fd, urgent.dscp, urgent.soPriority));
  return ternSuccess;
}

// A tcp pair's level sockets, at the pair's turn in setupTransports.
ternResult_t levelSockets(Comm& c, Mesh& m, int p) {
  if (p < c.rank) return connectSlots(c, m, p, 1, kLevels);
  return acceptUntil(c, m, [&] {
    for (auto& v : m.dataFd)
      if (v[p] < 0) return false;
    return true;
  });
}

// Hosts in order of their lowest rank, ranks of a host in rank order.
void orderRing(Comm& c) {
  c.ring.clear();
  std::vector<bool> placed(c.nranks, false);
  for (int r = 0; r < c.nranks; ++r) {
    if (placed[r]) continue;
    for (int q = r; q < c.nranks; ++q)
      if (!placed[q] && c.peers[q].hostHash == c.peers[r].hostHash) {
        c.ring.push_back(q);
        placed[q] = true;
      }
  }
  c.ringPos.assign(c.nranks, 0);
  for (int i = 0; i < c.nranks; ++i) c.ringPos[c.ring[i]] = i;
}

// Peers are visited in increasing rank order on every rank, which visits the
// pairs in one global order: the pairwise exchanges below cannot deadlock.
// Every connection is set up lazy: its fifos cost memory only once an
// operation uses it (Conn::activate), so a job's memory follows the levels
// and peers it talks to (perf/memory_per_peer: 8 MB per peer when the default
// level was pre-faulted at init, whether used or not).
ternResult_t setupTransports(Comm& c, Mesh& m) {
  const Deadline d = m.d;
  const bool rdma = hostHasActiveRdma();
  TERN_CHECK(makeTransports(c.cfg, rdma, &c.transports));
  if (c.cfg.transport == "auto")
    TERN_LOG(Info, "across hosts: %s (TERN_NET=%s, %s)",
             autoUsesUcx(c.cfg.net, ucxAvailable(), rdma) ? "ucx" : "tcp", c.cfg.net.c_str(),
             rdma ? "an active RDMA port" : "no active RDMA port");
  for (auto& lv : c.conns) lv.resize(c.nranks);
  for (int p = 0; p < c.nranks; ++p) {
    PeerFacts f{c.rank, p, c.peers[p].hostHash == c.peers[c.rank].hostHash};
    Transport* t;
    TERN_CHECK(pickTransport(c.transports, f, c.cfg, &t));
    if (p != c.rank) {  // both ends must pick the same one
      char mine[16] = {}, theirs[16] = {};
      strncpy(mine, t->name(), sizeof mine - 1);
      TERN_CHECK(sendAll(c.meshFd[p], mine, sizeof mine, d));
      TERN_CHECK(recvAll(c.meshFd[p], theirs, sizeof theirs, d));
      theirs[sizeof theirs - 1] = '\0';
      TERN_CHECK(agreeTransport(c.transports, f, c.cfg, theirs, &t));
    }
    const bool tcp = !strcmp(t->name(), "tcp");
    if (tcp) TERN_CHECK(levelSockets(c, m, p));
    for (int level = 0; level < kLevels; ++level) {
      std::unique_ptr<Conn>& conn = c.conns[level][p];
      ConnSetup s{c.rank, p, p == c.rank ? -1 : c.meshFd[p], m.dataFd[level][p], level,
                  &c.cfg, d, flowMarkOf(c.cfg, level)};
      TERN_CHECK(t->connect(s, &conn));
      if (tcp) m.dataFd[level][p] = -1;  // the connection owns it now
      conn->peer = p;
      conn->flowClass = s.mark.flowClass;
      c.connView[level].push_back(conn.get());
    }
  }
  return ternSuccess;
}

}  // namespace

ternResult_t commCreate(int nranks, int rank, const IdContents& id, const ternConfig_t* user,
                        Comm** out) {
  auto c = std::make_unique<Comm>();
  c->rank = rank;
  c->nranks = nranks;
  c->cfg = readConfig();
  c->secret = id.secret;
  setLogRank(rank);
  TERN_CHECK(resolveConfig(user, nranks, &c->cfg));
  TERN_CHECK(makeTransports(c->cfg, hostHasActiveRdma(), &c->transports));  // checks TERN_TRANSPORT / TERN_NET early
  TERN_LOG(Info, "%s", describeFlows(c->cfg).c_str());
  Deadline d = deadlineAfter(c->cfg.timeoutSec);
  SockAddr bindAddr, listenAddr;
  std::string ifname;
  TERN_CHECK(pickInterface(c->cfg.ifname, &bindAddr, &ifname));
  int lfd;
  TERN_CHECK(listenOn(bindAddr, &lfd, &listenAddr));
  TERN_LOG(Info, "rank %d/%d listening on %s (%s)", rank, nranks, listenAddr.str().c_str(),
           ifname.c_str());
  ternResult_t r = exchangeWithRoot(id.root, c->secret, rank, nranks,
                                    makePeerInfo(listenAddr, localHostHash()), d, &c->peers);
  std::vector<int> bindCpus;
  {
    AuthGate gate(lfd, c->secret, ConnKind::Mesh, 1, c->cfg.handshakeSec,
                  "rank " + std::to_string(rank));
    Mesh mesh{gate, d, {}};
    if (r == ternSuccess) r = placeComm(*c, &bindCpus);
    if (r == ternSuccess) r = formMesh(*c, mesh);
    if (r == ternSuccess) r = setupTransports(*c, mesh);
    for (auto& v : mesh.dataFd)
      for (int& fd : v) closeFd(fd);
  }
  close(lfd);  // after the tcp pairs' level sockets
  TERN_CHECK(r);
  orderRing(*c);
  c->startBookkeeping();
  c->engine = std::make_unique<Executor>(*c, rank, c->cfg.timeoutSec, c->cfg.priorityHoldSec);
  c->trace = Trace::fromEnv(rank, flowClassTable(c->cfg).data());
  c->engine->setTrace(c->trace.get());
  if (!bindCpus.empty() && !c->engine->bindTo(bindCpus))
    TERN_LOG(Warn, "could not bind the progress thread to CPUs %s", formatPus(bindCpus).c_str());
  reportRdmaOnce();
  TERN_LOG(Info, "communicator ready: rank %d of %d", rank, nranks);
  *out = c.release();
  return ternSuccess;
}

}  // namespace tern

using namespace tern;

PlanCtx ternComm::planCtx(int level) const {
  PlanCtx x;
  x.rank = rank;
  x.nranks = nranks;
  x.ring = &ring;
  x.ringPos = &ringPos;
  x.cfg = &cfg;
  x.mem = memOps(MemType::Host);  // host buffers; a call on a stream brings its own (issue)
  x.conns = &connView[level];
  return x;
}

void ternComm::startBookkeeping() {
  p2pSeq.assign(static_cast<size_t>(nranks) * kLevels, 0);
  streamsOpened.assign(nranks, 0);
  ctlIn.assign(nranks, std::string());
  ctlClosed.assign(nranks, false);
}

void ternComm::issue(const std::vector<OpPtr>& ops, bool wake) {
  std::lock_guard<std::mutex> lk(issueMu);
  for (const OpPtr& op : ops) {
    op->ctx = planCtx(op->level);
    if (op->streamMem) op->ctx.mem = op->streamMem.get();  // device buffers: chosen per call
    // Receives are numbered when they start (Executor::nextRecvSeq).
    if (op->collective) op->desc.seq = collSeq[op->level]++;
    else if (op->send) op->desc.seq = p2pSeq[static_cast<size_t>(op->peer) * kLevels + op->level]++;
    TERN_LOG(Trace, "issue %s", describe(op->desc).c_str());
    if (trace) trace->issued(*op);
  }
  engine->submit(ops, wake);
}

namespace {
// What a failing rank tells its peers before closing: code and sentence.
struct NoticeHeader {
  uint32_t magic, code, len;
};
constexpr uint32_t kNoticeMagic = 0x4e544354;  // "TCTN"
}  // namespace

void ternComm::fail(ternResult_t r) {
  int expected = ternSuccess;
  asyncError.compare_exchange_strong(expected, r);
  for (auto& lv : conns)
    for (auto& c : lv) c->gone = true;  // nothing more goes out: no graceful close
  for (int fd : meshFd)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

// Every failure path of the communicator (the executor's, a peer's notice)
// comes through here, so its last error is always the newest sentence.
void ternComm::failWith(ternResult_t r, const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(errMu);
    if (failReason.empty()) failReason = why;
  }
  setLastError(why);
  fail(r);
}

void ternComm::onFailure(ternResult_t r, const std::string& why) {
  // Ranks that called different operations: every peer learns the sentence
  // before our sockets close, so all of them report the same mismatch.
  if (r == ternInvalidUsage && asyncError.load() == ternSuccess && !aborted.load()) {
    NoticeHeader h{kNoticeMagic, static_cast<uint32_t>(r), static_cast<uint32_t>(why.size())};
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    msg += why;
    for (int fd : meshFd)
      if (fd >= 0) (void)!::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Before any operation completes with the error (and its caller may reuse
  // its buffers): peers still reading our posted buffers must learn it.
  for (auto& lv : conns)
    for (auto& c : lv)
      if (c) c->directAbandon();
  failWith(r, why);  // also what a nonblocking caller reads after ternCommGetAsyncError
}

void ternComm::readNotices(int p) {
  char buf[4096];
  for (;;) {
    ssize_t k = recv(meshFd[p], buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      ctlIn[p].append(buf, static_cast<size_t>(k));
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    for (auto& lv : conns) lv[p]->gone = true;  // closed: the peer exited or failed
    ctlClosed[p] = true;
    break;
  }
  std::string& in = ctlIn[p];
  NoticeHeader h;
  if (in.size() < sizeof h) return;
  memcpy(&h, in.data(), sizeof h);
  if (h.magic != kNoticeMagic || h.len > 65536) {
    in.clear();
    return;
  }
  if (in.size() < sizeof h + h.len) return;
  failWith(static_cast<ternResult_t>(h.code), in.substr(sizeof h, h.len));
}

void ternComm::refreshLiveness() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (int p = 0; p < nranks; ++p) {
    // Polled even when a data connection saw the peer go: a notice it sent
    // before closing must still be read.
    if (meshFd[p] < 0 || ctlClosed[p]) continue;
    fds.push_back({meshFd[p], POLLIN, 0});
    who.push_back(p);
  }
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents) readNotices(who[i]);
}

ternResult_t ternComm::checkHealth() {
  if (aborted.load()) return setError(ternInvalidUsage, "the communicator was aborted");
  if (asyncError.load() == ternSuccess) refreshLiveness();
  int e = asyncError.load();
  if (e == ternSuccess) return ternSuccess;
  std::lock_guard<std::mutex> lk(errMu);
  return setError(static_cast<ternResult_t>(e),
                  failReason.empty() ? std::string("the communicator failed earlier") : failReason);
}

void ternComm::wireBytesByClass(uint64_t* sent, uint64_t* recv) const {
  std::fill(sent, sent + kLevels, 0);
  std::fill(recv, recv + kLevels, 0);
  for (auto& lv : conns)
    for (auto& c : lv) {
      if (c->peer == rank) continue;
      sent[c->flowClass] += c->bytesSent.load(std::memory_order_relaxed);
      recv[c->flowClass] += c->bytesRecv.load(std::memory_order_relaxed);
    }
}

void ternComm::wireBytes(uint64_t* sent, uint64_t* recv) const {
  uint64_t s[kLevels], r[kLevels];
  wireBytesByClass(s, r);
  *sent = *recv = 0;
  for (int k = 0; k < kLevels; ++k) *sent += s[k], *recv += r[k];
}

const char* ternComm::transportName(int peer) const {
  return conns[TERN_PRIORITY_DEFAULT][peer]->name();
}

void ternComm::setLastError(const std::string& e) {
  std::lock_guard<std::mutex> lk(errMu);
  lastError = e;
  lastErrorStamp = nextErrorStamp();
}

std::string ternComm::getLastError(uint64_t* stamp) {
  std::lock_guard<std::mutex> lk(errMu);
  if (stamp) *stamp = lastErrorStamp;
  return lastError;
}

std::string ternComm::failureReason() {
  std::lock_guard<std::mutex> lk(errMu);
  return failReason;
}

ternComm::~ternComm() {
  if (engine) {
    engine->drain();  // every admitted operation ends (done, or failed within the timeout)
    engine->stop();
    engine.reset();   // nothing uses conns after this
  }
  if (trace) trace->write();  // after the drain: every operation has ended
  for (auto& lv : conns) lv.clear();
  transports.clear();  // after the connections (UCX's worker outlives its endpoints)
  for (int& fd : meshFd) closeFd(fd);
}
