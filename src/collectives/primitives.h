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

// A codec turns groups of incoming bytes into groups of outgoing bytes (and
// may write the caller's buffer itself): the ternary allreduce's fused
// decode-add-encode.  `first` counts groups from the start of the step.
class GroupCodec {
 public:
  virtual ~GroupCodec() = default;
  virtual void run(const char* in, char* out, size_t first, size_t n) const = 0;
};

struct Step {
  Conn* in = nullptr;            // receive from (nullptr: nothing to receive)
  Conn* out = nullptr;           // send to (nullptr: nothing to send)
  const char* local = nullptr;   // reduced with incoming bytes, or the source when !in
  char* dst = nullptr;           // where the result lands (may be nullptr)
  size_t bytes = 0;              // payload bytes (codec steps: groups)
  bool reduce = false;           // result = incoming (op) local
  bool finalAvg = false;         // ternAvg: divide this (last) reduction by nranks
  const GroupCodec* codec = nullptr;  // codec step: framed, group-wise
  uint32_t inUnit = 0, outUnit = 0;   // codec step: bytes per group in / out
};

// Codec steps travel framed: a 16-byte header (magic, unit, groups) that the
// receiver checks before reading a byte of payload.
struct StepHeader {
  uint32_t magic, unit;
  uint64_t groups;
};
constexpr uint32_t kStepMagic = 0x59524e54;  // "TNRY"

struct Program {
  std::vector<Step> steps;
  // Execution state, owned by runPrograms: the current step, payload units
  // done, and what is left of the in / out prologue (padding, header).
  size_t cur = 0, off = 0;
  bool started = false;
  size_t inSkip = 0, inHdr = 0, inSkip2 = 0, outSkip = 0, outHdr = 0, outSkip2 = 0;
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

// Ring positions (see ternComm::ring) and the neighbours' connections.
inline int ringPos(const Comm& c) { return c.ringPos[c.rank]; }
inline int ringRank(const Comm& c, int pos) { return c.ring[((pos % c.nranks) + c.nranks) % c.nranks]; }
inline Conn* nextConn(Comm& c) { return c.conns[ringRank(c, ringPos(c) + 1)].get(); }
inline Conn* prevConn(Comm& c) { return c.conns[ringRank(c, ringPos(c) - 1)].get(); }

}  // namespace tern
