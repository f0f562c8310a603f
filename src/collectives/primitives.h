// Primitives: how collectives move data.  A collective is planned as one or
// more Programs; a Program is a list of Steps executed in order; a Step
// streams `bytes` in from one connection and/or out to another, optionally
// reducing the incoming bytes with a local buffer on the fly (NCCL's
// recvReduceSend / recvReduceCopySend / recvCopySend, one pass each).
// runPrograms() drives all programs together until every one is done, with
// bounded waits: no progress for TERN_TIMEOUT seconds is ternTimeout, a dead
// peer is ternRemoteError.
#pragma once
#include <cstddef>
#include <vector>

#include "core/comm.h"
#include "tern/tern.h"

namespace tern {

struct Step {
  Conn* in = nullptr;            // receive from (nullptr: nothing to receive)
  Conn* out = nullptr;           // send to (nullptr: nothing to send)
  const char* local = nullptr;   // reduced with incoming bytes, or the source when !in
  char* dst = nullptr;           // where the result lands (may be nullptr)
  size_t bytes = 0;
  bool reduce = false;           // result = incoming (op) local
  bool finalAvg = false;         // ternAvg: divide this (last) reduction by nranks
};

struct Program {
  std::vector<Step> steps;
  // Execution state, owned by runPrograms.
  size_t cur = 0, off = 0, padIn = 0, padOut = 0;
  void add(const Step& s) {
    if (s.bytes > 0) steps.push_back(s);
  }
};

struct Reduction {
  ternDataType_t dt = ternUint8;
  ternRedOp_t op = ternSum;
};

// Runs the programs to completion.  `what` names the collective in errors.
ternResult_t runPrograms(Comm& c, std::vector<Program>& progs, const Reduction& red,
                         const char* what);
ternResult_t runProgram(Comm& c, Program& prog, const Reduction& red, const char* what);

// Ring neighbours' connections.
inline Conn* nextConn(Comm& c) { return c.conns[(c.rank + 1) % c.nranks].get(); }
inline Conn* prevConn(Comm& c) { return c.conns[(c.rank + c.nranks - 1) % c.nranks].get(); }

}  // namespace tern
