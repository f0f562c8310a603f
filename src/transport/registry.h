// The transport registry: a transport is a named entry that says whether it
// can connect this rank to a peer and makes the connection (one per priority
// level, opened lazily by the connection table).  The communicator asks the registry, never a transport by name;
// TERN_TRANSPORT / TERN_NET filter what the registry offers.  Shared state a
// transport needs (UCX's context and worker) lives in its instance, one set
// of instances per communicator.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace tern {

// What a transport decides on.
struct PeerFacts {
  int rank, peer;
  bool sameHost;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual bool canConnect(const PeerFacts& f) const = 0;
  // The connection to s.peer at s.level, unopened: the connection table
  // (conn_table.h) opens it on first use (Conn::open).
  virtual std::unique_ptr<Conn> make(const ConnSetup& s) = 0;
};

// Whether TERN_TRANSPORT=auto carries traffic between hosts over UCX: when
// TERN_NET=ucx, or under TERN_NET=auto when this build has UCX and the host
// has an active RDMA port (`rdma`).  Without RDMA, UCX runs over TCP and
// measured 0.54-1.04x tern's own tcp (perf/RESULTS.md), so auto takes tcp.
bool autoUsesUcx(const std::string& net, bool ucxBuilt, bool rdma);

// The transports this build offers under cfg, in order of preference (self,
// shm, ucx, tcp); `rdma`: the host has an active RDMA port (see autoUsesUcx).
// A bad TERN_TRANSPORT / TERN_NET is ternInvalidArgument.
ternResult_t makeTransports(const Config& cfg, bool rdma,
                            std::vector<std::unique_ptr<Transport>>* out);

// The first transport that can connect to the peer (null: none can).
Transport* firstThatConnects(const std::vector<std::unique_ptr<Transport>>& ts, const PeerFacts& f);
// The same, or an error saying why none can.
ternResult_t pickTransport(const std::vector<std::unique_ptr<Transport>>& ts, const PeerFacts& f,
                           const Config& cfg, Transport** out);

// Both ends must agree: `theirs` is the name the peer picked.  Under auto a
// build without UCX meets one with it on tcp; any other disagreement is a
// configuration error.
ternResult_t agreeTransport(const std::vector<std::unique_ptr<Transport>>& ts, const PeerFacts& f,
                            const Config& cfg, const char* theirs, Transport** mine);

}  // namespace tern
