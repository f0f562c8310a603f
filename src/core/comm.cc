// Communicator creation and teardown:
//   1. listen on the chosen interface (TERN_SOCKET_IFNAME),
//   2. swap addresses with everyone through the bootstrap root,
//   3. build an authenticated full mesh of sockets (connect to lower ranks,
//      accept from higher ones; strangers are logged and dropped),
//   4. pick a transport per peer and set it up over the mesh socket,
//   5. start the progress thread.
#include "core/comm.h"

#include "collectives/ternary.h"
#include "topology/rdma.h"
#include "topology/topology.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace tern {

namespace {

ternResult_t formMesh(Comm& c, int lfd, Deadline d) {
  c.meshFd.assign(c.nranks, -1);
  for (int p = 0; p < c.rank; ++p) {
    int fd;
    TERN_CHECK(connectBefore(c.peers[p].sockAddr(), d, &fd));
    c.meshFd[p] = fd;
    TERN_CHECK(authConnect(fd, c.secret, ConnKind::Mesh, c.rank, d));
  }
  for (int need = c.nranks - 1 - c.rank; need > 0;) {
    int fd, peer = -1;
    SockAddr from;
    TERN_CHECK(acceptBefore(lfd, d, &fd, &from));
    if (authAccept(fd, c.secret, ConnKind::Mesh, std::min(d, deadlineAfter(10)), &peer) !=
            ternSuccess ||
        peer <= c.rank || peer >= c.nranks || c.meshFd[peer] >= 0) {
      TERN_LOG(Warn, "rejected a connection from %s: %s", from.str().c_str(),
               peer >= 0 ? "unexpected rank" : lastThreadError().c_str());
      closeFd(fd);
      continue;
    }
    c.meshFd[peer] = fd;
    --need;
  }
  return ternSuccess;
}

enum class Kind : char { Self = 's', Shm = 'm', Tcp = 't', Ucx = 'u' };

ternResult_t chooseKind(const Comm& c, int p, Kind* k) {
  if (p == c.rank) {
    *k = Kind::Self;
    return ternSuccess;
  }
  bool sameHost = c.peers[p].hostHash == c.peers[c.rank].hostHash;
  if (c.cfg.transport == "shm" && !sameHost)
    return setError(ternInvalidUsage, "TERN_TRANSPORT=shm but ranks " + std::to_string(c.rank) +
                                          " and " + std::to_string(p) +
                                          " are on different hosts");
  bool shm = c.cfg.transport == "shm" || (c.cfg.transport == "auto" && sameHost);
  // Across hosts auto prefers UCX (the RDMA path; over plain TCP it measured
  // level with tern's tcp, perf/RESULTS.md) when this build has it, unless
  // TERN_NET says otherwise.
  bool autoUcx = c.cfg.net == "ucx" || (c.cfg.net == "auto" && ucxAvailable());
  bool ucx = c.cfg.transport == "ucx" || (c.cfg.transport == "auto" && autoUcx);
  *k = shm ? Kind::Shm : ucx ? Kind::Ucx : Kind::Tcp;
  return ternSuccess;
}

// Both ends must agree.  Under auto a build without UCX meets one with it on
// tcp; any other disagreement is a configuration error.
ternResult_t agreeKind(const Comm& c, int p, Kind* k, Kind theirs) {
  if (theirs == *k) return ternSuccess;
  bool ucxVsTcp = (*k == Kind::Ucx && theirs == Kind::Tcp) || (*k == Kind::Tcp && theirs == Kind::Ucx);
  if (c.cfg.transport == "auto" && ucxVsTcp) {
    TERN_LOG(Info, "rank %d cannot or will not use ucx: tcp to it", p);
    *k = Kind::Tcp;
    return ternSuccess;
  }
  return setError(ternInvalidUsage, "ranks " + std::to_string(c.rank) + " and " + std::to_string(p) +
                                        " chose different transports; set TERN_TRANSPORT the same "
                                        "on every rank");
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
ternResult_t setupTransports(Comm& c, Deadline d) {
  c.conns.resize(c.nranks);
  for (int p = 0; p < c.nranks; ++p) {
    Kind k;
    TERN_CHECK(chooseKind(c, p, &k));
    if (k == Kind::Self) {
      TERN_CHECK(makeSelfConn(c.cfg, &c.conns[p]));
    } else {
      Kind theirs{};
      TERN_CHECK(sendAll(c.meshFd[p], &k, 1, d));
      TERN_CHECK(recvAll(c.meshFd[p], &theirs, 1, d));
      TERN_CHECK(agreeKind(c, p, &k, theirs));
      ConnSetup s{c.rank, p, c.meshFd[p], &c.cfg, d};
      if (k == Kind::Shm) TERN_CHECK(makeShmConn(s, &c.conns[p]));
      else if (k == Kind::Ucx) TERN_CHECK(makeUcxConn(s, &c.ucx, &c.conns[p]));
      else TERN_CHECK(makeTcpConn(s, &c.conns[p]));
    }
    c.conns[p]->peer = p;
  }
  return ternSuccess;
}

}  // namespace

ternResult_t commCreate(int nranks, int rank, const IdContents& id, Comm** out) {
  auto c = std::make_unique<Comm>();
  c->rank = rank;
  c->nranks = nranks;
  c->cfg = readConfig();
  c->secret = id.secret;
  setLogRank(rank);
  // Every ternary width must divide the fifo (see ternaryFifoQuantum).
  size_t q = ternaryFifoQuantum(nranks);
  c->cfg.fifoBytes = (c->cfg.fifoBytes + q - 1) / q * q;
  c->ternary = std::make_unique<TernaryState>();
  c->ternary->cfg = ternaryConfigFromEnv();
  if (const char* bad = ternaryConfigProblem(c->ternary->cfg))
    return setError(ternInvalidArgument, std::string("TERN_TERNARY_*: ") + bad);
  if (c->cfg.transport != "auto" && c->cfg.transport != "shm" && c->cfg.transport != "tcp" &&
      c->cfg.transport != "ucx")
    return setError(ternInvalidArgument, "TERN_TRANSPORT='" + c->cfg.transport +
                                             "' is not one of auto, shm, tcp, ucx");
  if (c->cfg.net != "auto" && c->cfg.net != "ucx" && c->cfg.net != "tcp")
    return setError(ternInvalidArgument, "TERN_NET='" + c->cfg.net + "' is not one of auto, ucx, tcp");
  if ((c->cfg.transport == "ucx" || c->cfg.net == "ucx") && !ucxAvailable())
    return setError(ternInvalidUsage, "TERN_TRANSPORT=ucx or TERN_NET=ucx but tern was built without UCX "
                                      "(install libucx-dev and rebuild)");
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
  if (r == ternSuccess) r = placeComm(*c, &bindCpus);
  if (r == ternSuccess) r = formMesh(*c, lfd, d);
  close(lfd);
  if (r == ternSuccess) r = setupTransports(*c, d);
  TERN_CHECK(r);
  orderRing(*c);
  Comm* raw = c.get();
  c->engine = std::make_unique<ProgressEngine>(rank, [raw](ternResult_t e) { raw->fail(e); });
  if (!bindCpus.empty() && !c->engine->bindTo(bindCpus))
    TERN_LOG(Warn, "could not bind the progress thread to CPUs %s", formatPus(bindCpus).c_str());
  reportRdmaOnce();
  TERN_LOG(Info, "communicator ready: rank %d of %d", rank, nranks);
  *out = c.release();
  return ternSuccess;
}

}  // namespace tern

using namespace tern;

void ternComm::fail(ternResult_t r) {
  int expected = ternSuccess;
  asyncError.compare_exchange_strong(expected, r);
  for (auto& c : conns) c->gone = true;  // nothing more goes out: no graceful close
  for (int fd : meshFd)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

void ternComm::refreshLiveness() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (int p = 0; p < nranks; ++p) {
    // tcp peers report a closed socket through progress(); only idle mesh
    // sockets (shm peers) need watching here.
    if (meshFd[p] < 0 || conns[p]->pollFd() >= 0 || conns[p]->gone) continue;
    fds.push_back({meshFd[p], POLLIN, 0});
    who.push_back(p);
  }
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    char b;
    if (fds[i].revents && recv(fds[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
      conns[who[i]]->gone = true;
  }
}

ternResult_t ternComm::checkHealth() {
  if (aborted.load()) return setError(ternInvalidUsage, "the communicator was aborted");
  int e = asyncError.load();
  if (e != ternSuccess)
    return setError(static_cast<ternResult_t>(e), "the communicator failed earlier");
  refreshLiveness();
  return ternSuccess;
}

void ternComm::wireBytes(uint64_t* sent, uint64_t* recv) const {
  *sent = *recv = 0;
  for (auto& c : conns) {
    if (!strcmp(c->name(), "self")) continue;
    *sent += c->bytesSent;
    *recv += c->bytesRecv;
  }
}

void ternComm::setLastError(const std::string& e) {
  std::lock_guard<std::mutex> lk(errMu);
  lastError = e;
}

std::string ternComm::getLastError() {
  std::lock_guard<std::mutex> lk(errMu);
  return lastError;
}

ternComm::~ternComm() {
  engine.reset();  // joins the progress thread first: nothing uses conns after
  conns.clear();
  ucx.reset();     // after its endpoints
  for (int& fd : meshFd) closeFd(fd);
}
