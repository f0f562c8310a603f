// Bootstrap: the unique id, the root rendezvous that hands every rank the
// address table, and the identity of a host (for choosing shm).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/auth.h"
#include "base/env.h"
#include "base/socket.h"

namespace tern {

// What every rank tells the root, and the root tells everyone.
struct PeerInfo {
  sockaddr_in6 addr;   // big enough for v4 and v6; family says which
  uint32_t addrLen;
  uint32_t algo;       // its TERN_ALGO's code (comm/config.h): every rank's must agree
  uint64_t modelHash;  // its TERN_MODEL_FILE model's (0: none): every rank's must agree
  uint64_t hostHash;   // equal for ranks on one host (hostIdentity)
  // The transport this rank picks for a peer on its own host [0] and on
  // another host [1] ("" where none can reach it): every rank checks its
  // pairs' agreement from the table, without a word on any socket.
  char transportFor[2][16];
  SockAddr sockAddr() const;
};

PeerInfo makePeerInfo(const SockAddr& a, uint64_t hostHash);

struct IdContents {
  Secret secret;
  SockAddr root;
};
void encodeId(const IdContents& c, ternUniqueId* id);
ternResult_t decodeId(const ternUniqueId& id, IdContents* c);

// Starts the root listener thread at `bindAddr` (port 0: any).  It serves one
// communicator's rendezvous, then exits; it gives up after cfg.timeoutSec.
// Each connection gets cfg.handshakeSec to authenticate (base/gate.h).
ternResult_t startRoot(const SockAddr& bindAddr, const Secret& s, const Config& cfg,
                       SockAddr* actual);
// Rank 0 of a launcher-started job: the root at the address TERN_ROOT (or
// MASTER_ADDR, ...) names, not every address of the host; TERN_ROOT_BIND
// (e.g. 0.0.0.0) listens elsewhere, on the same port, when asked.
ternResult_t startEnvRoot(const IdContents& id, const Config& cfg);

// Sends this rank's info to the root and receives the table of all ranks.
ternResult_t exchangeWithRoot(const SockAddr& root, const Secret& s, int rank, int nranks,
                              const PeerInfo& mine, Deadline d, std::vector<PeerInfo>* all);

// Hostname, boot id and network namespace: ranks in different network
// namespaces count as different hosts, which is what emulated multi-host
// tests need.
uint64_t localHostHash();
// This rank's host identity: TERN_HOST_ID when set (ranks with different ids
// are on different hosts whatever they share, ranks with the same id on one
// host: containers that share a kernel, emulated hosts), else
// localHostHash().  *source says which, for the log.
uint64_t hostIdentity(std::string* source);

}  // namespace tern
