#include "transport/registry.h"

#include <cstring>
#include <string>

#include "base/error.h"
#include "base/log.h"

namespace tern {

namespace {

class SelfTransport : public Transport {
 public:
  const char* name() const override { return "self"; }
  bool canConnect(const PeerFacts& f) const override { return f.peer == f.rank; }
  std::unique_ptr<Conn> make(const ConnSetup& s) override { return makeSelfConn(*s.cfg); }
};

class ShmTransport : public Transport {
 public:
  const char* name() const override { return "shm"; }
  bool canConnect(const PeerFacts& f) const override { return f.sameHost && f.peer != f.rank; }
  std::unique_ptr<Conn> make(const ConnSetup& s) override { return makeShmConn(s); }
};

class TcpTransport : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  bool canConnect(const PeerFacts& f) const override { return f.peer != f.rank; }
  std::unique_ptr<Conn> make(const ConnSetup& s) override { return makeTcpConn(s); }
};

class UcxTransport : public Transport {
 public:
  // Across hosts only under auto (inside one host shm is faster); anywhere
  // when asked for by name.
  UcxTransport(bool anyPeer, bool rdma) : anyPeer_(anyPeer), shared_(makeUcxShared(rdma)) {}
  const char* name() const override { return "ucx"; }
  bool canConnect(const PeerFacts& f) const override {
    return f.peer != f.rank && (anyPeer_ || !f.sameHost);
  }
  std::unique_ptr<Conn> make(const ConnSetup& s) override { return makeUcxConn(s, shared_); }

 private:
  bool anyPeer_;
  std::shared_ptr<UcxShared> shared_;  // the context, made by the first connection that opens
};

}  // namespace

bool autoUsesUcx(const std::string& net, bool ucxBuilt, bool rdma) {
  return net == "ucx" || (net == "auto" && ucxBuilt && rdma);
}

ternResult_t makeTransports(const Config& cfg, bool rdma,
                            std::vector<std::unique_ptr<Transport>>* out) {
  const std::string& t = cfg.transport;
  if (t != "auto" && t != "shm" && t != "tcp" && t != "ucx")
    return setError(ternInvalidArgument, "TERN_TRANSPORT='" + t + "' is not one of auto, shm, tcp, ucx");
  if (cfg.net != "auto" && cfg.net != "ucx" && cfg.net != "tcp")
    return setError(ternInvalidArgument, "TERN_NET='" + cfg.net + "' is not one of auto, ucx, tcp");
  if ((t == "ucx" || cfg.net == "ucx") && !ucxAvailable())
    return setError(ternInvalidUsage, "TERN_TRANSPORT=ucx or TERN_NET=ucx but tern was built without UCX "
                                      "(install libucx-dev and rebuild)");
  out->clear();
  out->push_back(std::make_unique<SelfTransport>());
  if (t == "auto" || t == "shm") out->push_back(std::make_unique<ShmTransport>());
  bool autoUcx = autoUsesUcx(cfg.net, ucxAvailable(), rdma);
  if (t == "ucx" || (t == "auto" && autoUcx)) out->push_back(std::make_unique<UcxTransport>(t == "ucx", rdma));
  if (t == "auto" || t == "tcp") out->push_back(std::make_unique<TcpTransport>());
  return ternSuccess;
}

Transport* firstThatConnects(const std::vector<std::unique_ptr<Transport>>& ts, const PeerFacts& f) {
  for (auto& t : ts)
    if (t->canConnect(f)) return t.get();
  return nullptr;
}

ternResult_t pickTransport(const std::vector<std::unique_ptr<Transport>>& ts, const PeerFacts& f,
                           const Config& cfg, Transport** out) {
  *out = firstThatConnects(ts, f);
  if (*out) return ternSuccess;
  return setError(ternInvalidUsage, "TERN_TRANSPORT=" + cfg.transport + " but ranks " +
                                        std::to_string(f.rank) + " and " + std::to_string(f.peer) +
                                        " are on different hosts");
}

ternResult_t agreeTransport(const std::vector<std::unique_ptr<Transport>>& ts, const PeerFacts& f,
                            const Config& cfg, const char* theirs, Transport** mine) {
  if (!strcmp(theirs, (*mine)->name())) return ternSuccess;
  if (!*theirs)
    return setError(ternInvalidUsage, "rank " + std::to_string(f.peer) + " has no transport that reaches rank " +
                                          std::to_string(f.rank) + " (its TERN_TRANSPORT allows none for " +
                                          (f.sameHost ? "a peer on its host" : "another host") +
                                          "); set TERN_TRANSPORT the same on every rank");
  bool ucxVsTcp = (!strcmp(theirs, "tcp") && !strcmp((*mine)->name(), "ucx")) ||
                  (!strcmp(theirs, "ucx") && !strcmp((*mine)->name(), "tcp"));
  if (cfg.transport == "auto" && ucxVsTcp)
    for (auto& t : ts)
      if (!strcmp(t->name(), "tcp")) {
        TERN_LOG(Info, "rank %d cannot or will not use ucx: tcp to it", f.peer);
        *mine = t.get();
        return ternSuccess;
      }
  return setError(ternInvalidUsage, "ranks " + std::to_string(f.rank) + " and " +
                                        std::to_string(f.peer) +
                                        " chose different transports; set TERN_TRANSPORT the same "
                                        "on every rank");
}

}  // namespace tern
