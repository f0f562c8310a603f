#include "comm/bootstrap.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "base/gate.h"
#include "base/log.h"
#include "base/thread_name.h"

namespace tern {

static constexpr uint32_t kIdMagic = 0x7465726e;  // "tern"

SockAddr PeerInfo::sockAddr() const {
  SockAddr a;
  memcpy(&a.ss, &addr, addrLen);
  a.len = addrLen;
  return a;
}

namespace {
struct WireId {
  uint32_t magic;
  uint32_t addrLen;
  Secret secret;
  sockaddr_in6 addr;
};
static_assert(sizeof(WireId) <= TERN_UNIQUE_ID_BYTES, "unique id too small");

struct RankHello { int32_t rank, nranks; PeerInfo info; };
struct RootReply { int32_t status; char msg[124]; };

void replyError(int fd, const std::string& msg, Deadline d) {
  RootReply r{1, {}};
  strncpy(r.msg, msg.c_str(), sizeof r.msg - 1);
  sendAll(fd, &r, sizeof r, d);
}

// What is wrong with a rank's hello, given what the others said ("" if nothing).
std::string badHello(const RankHello& h, int claimed, int nranks, const std::vector<int>& fds) {
  if (h.nranks != nranks)
    return "rank " + std::to_string(h.rank) + " says nranks=" + std::to_string(h.nranks) +
           " but others said " + std::to_string(nranks);
  if (h.rank < 0 || h.rank >= nranks || h.rank != claimed)
    return "rank " + std::to_string(h.rank) + " is out of range for nranks=" +
           std::to_string(nranks);
  if (fds[h.rank] >= 0) return "two processes both claim rank " + std::to_string(h.rank);
  return "";
}

// The rendezvous: collect one hello per rank, then send everyone the table.
// The gate handshakes every connection concurrently, so strangers (idle,
// slow or wrong) cost the ranks nothing.
void rootLoop(int lfd, Secret secret, double timeoutSec, double handshakeSec) {
  nameThisThread("tern-bootroot");
  Deadline d = deadlineAfter(timeoutSec);
  int nranks = -1, arrived = 0;
  std::vector<int> fds;
  std::vector<PeerInfo> table;
  {
    AuthGate gate(lfd, secret, ConnKind::Root, sizeof(RankHello), handshakeSec,
                  "bootstrap root");
    while (nranks < 0 || arrived < nranks) {
      Admitted a;
      if (gate.next(d, &a) != ternSuccess) {
        TERN_LOG(Warn, "bootstrap root gave up: %d of %d ranks arrived within TERN_TIMEOUT",
                 arrived, nranks);
        break;
      }
      RankHello h;
      memcpy(&h, a.trailer.data(), sizeof h);
      if (nranks < 0 && h.nranks > 0) {
        nranks = h.nranks;
        fds.assign(nranks, -1);
        table.resize(nranks);
      }
      std::string bad = badHello(h, a.rank, nranks, fds);
      if (!bad.empty()) {
        replyError(a.fd, bad, deadlineAfter(handshakeSec));
        gate.refuse(a, bad);
        continue;
      }
      fds[h.rank] = a.fd;
      table[h.rank] = h.info;
      ++arrived;
    }
  }  // the gate drops unfinished handshakes and reports the rejection counts
  if (nranks > 0 && arrived == nranks) {
    RootReply ok{0, {}};
    for (int r = 0; r < nranks; ++r) {
      if (sendAll(fds[r], &ok, sizeof ok, d) != ternSuccess ||
          sendAll(fds[r], table.data(), sizeof(PeerInfo) * nranks, d) != ternSuccess)
        TERN_LOG(Warn, "bootstrap root could not send the table to rank %d", r);
    }
    TERN_LOG(Info, "bootstrap root served %d ranks", nranks);
  }
  for (int& fd : fds) closeFd(fd);
  close(lfd);
}
}  // namespace

void encodeId(const IdContents& c, ternUniqueId* id) {
  memset(id, 0, sizeof *id);
  WireId w{};
  w.magic = kIdMagic;
  w.addrLen = c.root.len;
  w.secret = c.secret;
  memcpy(&w.addr, &c.root.ss, c.root.len);
  memcpy(id->internal, &w, sizeof w);
}

ternResult_t decodeId(const ternUniqueId& id, IdContents* c) {
  WireId w;
  memcpy(&w, id.internal, sizeof w);
  if (w.magic != kIdMagic || w.addrLen == 0 || w.addrLen > sizeof w.addr)
    return setError(ternInvalidArgument,
                    "the unique id is not one made by ternGetUniqueId (bad magic or address)");
  c->secret = w.secret;
  memcpy(&c->root.ss, &w.addr, w.addrLen);
  c->root.len = w.addrLen;
  return ternSuccess;
}

ternResult_t startRoot(const SockAddr& bindAddr, const Secret& s, const Config& cfg,
                       SockAddr* actual) {
  int lfd;
  TERN_CHECK(listenOn(bindAddr, &lfd, actual));
  std::thread(rootLoop, lfd, s, cfg.timeoutSec, cfg.handshakeSec).detach();
  TERN_LOG(Info, "bootstrap root listening on %s", actual->str().c_str());
  return ternSuccess;
}

ternResult_t startEnvRoot(const IdContents& id, const Config& cfg) {
  SockAddr bindAddr = id.root, actual;
  std::string host = envString("TERN_ROOT_BIND", "");
  if (!host.empty()) {
    if (host.find(':') != std::string::npos && host[0] != '[') host = "[" + host + "]";
    TERN_CHECK(parseHostPort(host + ":" + std::to_string(id.root.port()), &bindAddr));
  }
  if (startRoot(bindAddr, id.secret, cfg, &actual) == ternSuccess) return ternSuccess;
  return setError(ternSystemError,
                  "rank 0 cannot host the bootstrap root at " + bindAddr.str() + " (" +
                      lastThreadError() +
                      "): TERN_ROOT (or MASTER_ADDR) must name an address of rank 0's host, "
                      "or set TERN_ROOT_BIND=0.0.0.0 to listen on every address");
}

ternResult_t exchangeWithRoot(const SockAddr& root, const Secret& s, int rank, int nranks,
                              const PeerInfo& mine, Deadline d, std::vector<PeerInfo>* all) {
  int fd;
  TERN_CHECK(connectBefore(root, d, &fd));
  RankHello h{rank, nranks, mine};
  RootReply reply{};
  ternResult_t r = authConnect(fd, s, ConnKind::Root, rank, d);
  if (r == ternSuccess) r = sendAll(fd, &h, sizeof h, d);
  if (r == ternSuccess) r = recvAll(fd, &reply, sizeof reply, d);
  if (r == ternSuccess && reply.status != 0) {
    reply.msg[sizeof reply.msg - 1] = '\0';
    r = setError(ternInvalidUsage, std::string("bootstrap root refused this rank: ") + reply.msg);
  }
  if (r == ternSuccess) {
    all->resize(nranks);
    r = recvAll(fd, all->data(), sizeof(PeerInfo) * nranks, d);
  }
  closeFd(fd);
  if (r == ternTimeout)
    return setError(ternTimeout, "timed out waiting for all " + std::to_string(nranks) +
                                     " ranks to reach the bootstrap root at " + root.str());
  return r;
}

uint64_t localHostHash() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string id = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  std::getline(boot, bootId);
  id += "|" + bootId;
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) id += "|" + std::to_string(st.st_ino);
  Secret zero{};
  return sipHash24(zero, id.data(), id.size());
}

uint64_t hostIdentity(std::string* source) {
  const std::string id = envString("TERN_HOST_ID", "");
  if (id.empty()) {
    *source = "hostname, boot id and network namespace";
    return localHostHash();
  }
  *source = "TERN_HOST_ID=" + id;
  // Hashed with a prefix that no hostname|boot-id string has, so an id never
  // equals a host's own hash by accident.
  const std::string key = "TERN_HOST_ID|" + id;
  Secret zero{};
  return sipHash24(zero, key.data(), key.size());
}

PeerInfo makePeerInfo(const SockAddr& a, uint64_t hostHash) {
  PeerInfo p{};
  memcpy(&p.addr, &a.ss, a.len);
  p.addrLen = a.len;
  p.hostHash = hostHash;
  return p;
}
}  // namespace tern
