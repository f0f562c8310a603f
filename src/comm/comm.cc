// Communicator creation and teardown:
//   1. listen on the chosen interface (TERN_SOCKET_IFNAME),
//   2. swap addresses with everyone through the bootstrap root,
//      (with the transport it picks for a peer on its own host and on another),
//   3. check that both ends of each of its pairs pick the same transport,
//   4. hand listener and transports to the connection table
//      (transport/conn_table.h), which makes the control socket to a peer and
//      each (peer, level) connection when it is first used (no socket
//      between ranks at creation: a ring job holds two control sockets per
//      rank, not one per peer),
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

#include "base/dtype.h"
#include "comm/config.h"
#include "engine/trace.h"
#include "base/error.h"
#include "base/gate.h"
#include "transport/conn_table.h"
#include "transport/registry.h"
#include "base/log.h"
#include "model/model_file.h"

namespace tern {

namespace {

// TERN_MODEL_FILE's model (none when unset), and a hash of its canonical
// text (FNV-1a, never 0) for the ranks' agreement.
ternResult_t loadModel(const std::string& path, std::shared_ptr<const model::Model>* m, uint64_t* hash) {
  if (path.empty()) return ternSuccess;
  try {
    auto loaded = std::make_shared<const model::Model>(model::loadModelFile(path));
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : model::modelJson(*loaded)) h = (h ^ ch) * 1099511628211ull;
    *hash = h | 1;
    *m = std::move(loaded);
    TERN_LOG(Info, "TERN_ALGO=auto asks the cost model in %s", path.c_str());
    return ternSuccess;
  } catch (const std::exception& e) {
    return setError(ternInvalidArgument, std::string("TERN_MODEL_FILE: ") + e.what());
  }
}

// What this rank picks for a peer on its own host and on another (published
// in its PeerInfo before the exchange; "" where none can reach such a peer).
void publishPicks(const std::vector<std::unique_ptr<Transport>>& ts, const Comm& c,
                  PeerInfo* mine) {
  for (int other = 0; other < 2; ++other) {
    if (const Transport* t = firstThatConnects(ts, PeerFacts{c.rank, c.rank + 1, other == 0}))
      strncpy(mine->transportFor[other], t->name(), sizeof mine->transportFor[other] - 1);
  }
}

// Hosts in order of their lowest rank, ranks of a host in rank order.
void orderRing(Comm& c) {
  c.ring.clear();
  for (const std::vector<int>& h : c.hosts.members) c.ring.insert(c.ring.end(), h.begin(), h.end());
  c.ringPos.assign(c.nranks, 0);
  for (int i = 0; i < c.nranks; ++i) c.ringPos[c.ring[i]] = i;
}

// Both ends of every pair must pick the same transport: each rank checks
// its pairs against what the peers published, so the pairs agree (or the
// ranks that disagree fail creation) without a control socket between them.
ternResult_t agreeTransports(const Comm& c, const std::vector<std::unique_ptr<Transport>>& ts,
                             std::vector<Transport*>* of) {
  of->assign(c.nranks, nullptr);
  for (int p = 0; p < c.nranks; ++p) {
    PeerFacts f{c.rank, p, c.hosts.hostOf[p] == c.hosts.hostOf[c.rank]};
    Transport*& t = (*of)[p];
    TERN_CHECK(pickTransport(ts, f, c.cfg, &t));
    if (p == c.rank) continue;
    char theirs[16];
    memcpy(theirs, c.peers[p].transportFor[f.sameHost ? 0 : 1], sizeof theirs);
    theirs[sizeof theirs - 1] = '\0';
    TERN_CHECK(agreeTransport(ts, f, c.cfg, theirs, &t));
  }
  return ternSuccess;
}

// The table takes the listener and the transports: every connection, and
// the control socket to each peer, is made on first use (a job's sockets and
// memory follow the levels and peers it talks to; perf/memory_per_peer,
// perf/bootstrap_perf).
void makeTable(Comm& c, std::unique_ptr<AuthGate> gate, int lfd,
               std::vector<std::unique_ptr<Transport>> ts, std::vector<Transport*> of) {
  TableSetup s;
  s.rank = c.rank;
  s.nranks = c.nranks;
  s.cfg = &c.cfg;
  s.secret = c.secret;
  for (const PeerInfo& p : c.peers) s.addrs.push_back(p.sockAddr());
  s.listenFd = lfd;
  s.gate = std::move(gate);
  s.transports = std::move(ts);
  s.transportOf = std::move(of);
  for (int level = 0; level < kLevels; ++level) s.marks[level] = flowMarkOf(c.cfg, level);
  s.onNotice = [&c](int, ternResult_t code, const std::string& why) { c.failWith(code, why); };
  c.table = std::make_unique<ConnTable>(std::move(s));
  c.table->start();
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
  TERN_CHECK(loadModel(c->cfg.modelFile, &c->model, &c->modelHash));
  const bool rdma = hostHasActiveRdma();
  std::vector<std::unique_ptr<Transport>> transports;
  TERN_CHECK(makeTransports(c->cfg, rdma, &transports));  // checks TERN_TRANSPORT / TERN_NET early
  if (c->cfg.transport == "auto")
    TERN_LOG(Info, "across hosts: %s (TERN_NET=%s, %s)",
             autoUsesUcx(c->cfg.net, ucxAvailable(), rdma) ? "ucx" : "tcp", c->cfg.net.c_str(),
             rdma ? "an active RDMA port" : "no active RDMA port");
  TERN_LOG(Info, "%s", describeFlows(c->cfg).c_str());
  Deadline d = deadlineAfter(c->cfg.timeoutSec);
  SockAddr bindAddr, listenAddr;
  std::string ifname;
  TERN_CHECK(pickInterface(c->cfg.ifname, &bindAddr, &ifname));
  int lfd;
  TERN_CHECK(listenOn(bindAddr, &lfd, &listenAddr));
  TERN_LOG(Info, "rank %d/%d listening on %s (%s)", rank, nranks, listenAddr.str().c_str(),
           ifname.c_str());
  // From here peers may dial this listener: its gate holds their handshakes
  // until the table serves it.
  auto gate = std::make_unique<AuthGate>(lfd, c->secret, ConnKind::Mesh, 1, c->cfg.handshakeSec,
                                         "rank " + std::to_string(rank));
  std::string hostSource;
  PeerInfo mine = makePeerInfo(listenAddr, hostIdentity(&hostSource));
  publishPicks(transports, *c, &mine);
  mine.algo = static_cast<uint32_t>(algoCode(c->cfg.algo));
  mine.modelHash = c->modelHash;
  ternResult_t r = exchangeWithRoot(id.root, c->secret, rank, nranks, mine, d, &c->peers);
  std::vector<int> bindCpus;
  std::vector<Transport*> transportOf;
  if (r == ternSuccess) {
    std::vector<uint64_t> ids;
    std::vector<uint32_t> algos;
    std::vector<uint64_t> models;
    for (const PeerInfo& p : c->peers)
      ids.push_back(p.hostHash), algos.push_back(p.algo), models.push_back(p.modelHash);
    c->hosts = groupByHost(ids);
    TERN_LOG(Info, "hosts by %s: %s", hostSource.c_str(), describeHosts(c->hosts).c_str());
    r = agreeAlgo(algos, models);
  }
  if (r == ternSuccess) r = placeComm(*c, &bindCpus);
  if (r == ternSuccess) r = agreeTransports(*c, transports, &transportOf);
  if (r != ternSuccess) {
    gate.reset();
    close(lfd);
    return r;
  }
  makeTable(*c, std::move(gate), lfd, std::move(transports), std::move(transportOf));
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

void ternComm::startBookkeeping() {
  p2pSeq.assign(static_cast<size_t>(nranks) * kLevels, 0);
  streamsOpened.assign(nranks, 0);
}

void ternComm::issue(const std::vector<OpPtr>& ops, bool wake) {
  std::lock_guard<tern::SpinLock> lk(issueMu);
  for (const OpPtr& op : ops) {
    number(*op);
    if (op->streamMem) op->ctx.mem = op->streamMem.get();  // device buffers: chosen per call
    if (trace) trace->issued(*op);
  }
  engine->submit(ops, wake);
}

void ternComm::number(Operation& op) {
  op.ctx = planCtx(op.level);
  // Receives are numbered when they start (Executor::nextRecvSeq).
  if (op.collective) op.desc.seq = collSeq[op.level]++;
  else if (op.send) op.desc.seq = p2pSeq[static_cast<size_t>(op.peer) * kLevels + op.level]++;
  TERN_LOG(Trace, "issue %s", describe(op.desc).c_str());
}

bool ternComm::claimAlone(int level, uint64_t* seq) {
  std::lock_guard<tern::SpinLock> lk(issueMu);  // issue order: nothing numbered later goes first
  if (!engine->claimIdle()) return false;
  *seq = collSeq[level]++;
  return true;
}

bool ternComm::claimTransfers(const Transfer* t, uint64_t* seqs, size_t n) {
  std::lock_guard<tern::SpinLock> lk(issueMu);  // issue order: nothing numbered later goes first
  if (!engine->claimIdle()) return false;
  for (size_t i = 0; i < n; ++i)
    seqs[i] = t[i].send ? p2pSeq[static_cast<size_t>(t[i].peer) * kLevels + t[i].level]++
                        : engine->startRecv(t[i].level, t[i].peer, nranks);
  return true;
}

bool ternComm::issueAlone(const std::vector<OpPtr>& ops) {
  if (!runsInline(inlineSettings(), ops)) return false;
  {
    std::lock_guard<tern::SpinLock> lk(issueMu);  // issue order: nothing numbered later goes first
    if (!engine->claimIdle()) return false;
    for (const OpPtr& op : ops) number(*op);
  }
  engine->runAlone(ops);
  return true;
}

void ternComm::fail(ternResult_t r) {
  int expected = ternSuccess;
  asyncError.compare_exchange_strong(expected, r);
  if (table) table->shutDown();
}

// Every failure path of the communicator (the executor's, a peer's notice)
// comes through here: the first one's sentence is its reason.
void ternComm::failWith(ternResult_t r, const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(errMu);
    if (failReason.empty()) failReason = why;
  }
  fail(r);
}

void ternComm::onFailure(ternResult_t r, const std::string& why) {
  // Ranks that called different operations: every peer learns the sentence
  // before our sockets close, so all of them report the same mismatch.
  if (r == ternInvalidUsage && asyncError.load() == ternSuccess && !aborted.load())
    table->notifyAll(r, why);
  // Before any operation completes with the error (and its caller may reuse
  // its buffers): peers still reading our posted buffers must learn it.
  // (Only open ones posted anything; one still opening is its thread's.)
  for (Conn* c : table->connsMade())
    if (c->direct && c->openState.load(std::memory_order_acquire) == Conn::kOpen) c->direct->abandon();
  failWith(r, why);  // also what a nonblocking caller hears from ternCommGetAsyncError
}

ternResult_t ternComm::firstFailure(ternResult_t r, std::string* why) {
  std::lock_guard<std::mutex> lk(errMu);
  const int e = asyncError.load();
  if (e == ternSuccess || failReason.empty()) return r;  // none, or an abort's (no sentence)
  *why = failReason;
  return static_cast<ternResult_t>(e);
}

void ternComm::refreshLiveness() {
  if (table) table->serviceControl();
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
  for (Conn* c : table->connsMade()) {
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
  return table->conn(peer, TERN_PRIORITY_DEFAULT)->name();
}

std::string ternComm::failureReason() {
  std::lock_guard<std::mutex> lk(errMu);
  return failReason;
}

ternResult_t ternComm::hearOwed() {
  if (!table) return ternSuccess;
  std::vector<tern::Conn*> streams;
  for (tern::Conn* c : table->connsMade())
    for (tern::Conn* k : {c, c->small(0)})
      if (k) streams.push_back(k);
  std::vector<tern::Conn*> owing = tern::Executor::owing(streams);
  if (owing.empty()) return ternSuccess;
  // A peer that heard of a mismatch first failed us: that is the answer.
  if (ternResult_t r = static_cast<ternResult_t>(asyncError.load()); r != ternSuccess)
    return tern::setError(r, failureReason());
  return engine->hearOwed(owing);
}

ternComm::~ternComm() {
  if (engine) {
    engine->drain();  // every admitted operation ends (done, or failed within the timeout)
    engine->stop();
    engine.reset();   // nothing uses the connections after this
  }
  if (trace) trace->write();  // after the drain: every operation has ended
  // Its threads end while `table` still names it (their failure callbacks
  // read it: fail()), then its connections, sockets and transports go.
  if (table) table->quiesce();
  table.reset();
}
