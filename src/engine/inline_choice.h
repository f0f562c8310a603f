// Whether work runs inline (the inline runner, on the caller's thread) or
// goes to the engine's rounds: decided here alone, as a pure function of
// what the work is and how the communicator is set.  Whether the engine is
// idle is not part of it: that is tested as the runner takes the drive token
// (InlineRunner::claimIdle), atomically with taking it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/operation.h"

namespace tern {

// The communicator's side (ternComm::inlineSettings).
struct InlineSettings {
  bool enabled = false;   // TERN_SMALL_PATH
  bool blocking = false;  // ternConfig_t.blocking: a nonblocking communicator returns at once
  bool traced = false;    // TERN_TRACE: every operation is traced by the engine
  size_t maxBytes = 0;    // TERN_SMALL_BYTES
  int nranks = 0;
};

// One call or operation.
struct InlineWork {
  uint64_t bytes = 0;        // payload (payloadBytes)
  bool waitsNow = true;      // its caller waits for it at once (a blocking call, not inside a group)
  bool onStream = false;     // device buffers on a stream: the call only enqueues
  bool preMul = false;       // a PreMulSum op scales its input first (the engine's Stepper)
  bool anySource = false;    // a receive from any source picks its sender in the rounds
  bool weightStream = false; // unordered or standing (weight streams)
  // A call run without an operation (steps, a kept phase, transfers:
  // comm/inline_calls.cc): those forms move bytes between ranks only.
  bool withoutOperation = false;
};

inline bool runsInline(const InlineSettings& s, const InlineWork& w) {
  return s.enabled && s.blocking && !s.traced && w.bytes <= s.maxBytes && w.waitsNow && !w.onStream &&
         !w.preMul && !w.anySource && !w.weightStream && (!w.withoutOperation || s.nranks > 1);
}

inline InlineWork inlineWork(const Operation& op) {
  InlineWork w;
  w.bytes = payloadBytes(op.desc);
  w.onStream = op.streamMem != nullptr;
  w.preMul = op.premul.count != 0;
  w.anySource = op.anySource;
  w.weightStream = op.unordered || op.standing;
  return w;
}

// A blocking call's operations: each runs inline, and several only as
// transfers on distinct streams (a send and a receive per peer and level at
// most: each stream's messages then go in issue order, whole).
inline bool runsInline(const InlineSettings& s, const std::vector<OpPtr>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const Operation& op = *ops[i];
    if (!runsInline(s, inlineWork(op)) || (ops.size() > 1 && op.collective)) return false;
    for (size_t j = 0; j < i; ++j)
      if (ops[j]->peer == op.peer && ops[j]->send == op.send && ops[j]->level == op.level) return false;
  }
  return !ops.empty();
}

}  // namespace tern
