// Weight streams (docs/DESIGN.md, "Weight streaming and live layer migration"): a one-way stream of
// versions of a set of tensors from one rank to another, moved in the
// background by the communicator's executor at the stream's priority level,
// over that level's connection to the peer (until the lazy per-flow table of
// issue 20 lands).  The API layer (api/weight_stream.cc) checks arguments and
// agrees on the stream with the peer; this is what happens after that.
#pragma once
#include <memory>

#include "comm/comm.h"
#include "streaming/stream_state.h"

namespace tern {

// The tensors laid out in one buffer (counts and types already checked).
StreamShape streamShape(int ntensors, const size_t* counts, const ternDataType_t* types);
// Sizes the staging buffers; the receiver admits its standing operation.
std::shared_ptr<StreamState> streamStart(Comm& c, int id, int peer, int sender, int level,
                                         const StreamShape& shape);
// Sender: snapshot and return (a version that has not started to move is
// superseded).  `version` must exceed every earlier one.
ternResult_t streamPush(Comm& c, const std::shared_ptr<StreamState>& s,
                        const void* const* tensors, long long version);
// Receiver: the newest complete version if newer than *version (never blocks).
void streamPoll(StreamState& s, void* const* tensors, long long* version);
// Receiver: blocks until a version >= minVersion arrived (at most
// `timeoutSec`), then as poll.
ternResult_t streamWait(StreamState& s, void* const* tensors, long long minVersion,
                        long long* version, double timeoutSec);
// Both: the sender's versions go first, then its close marker; the receiver
// waits for that marker (at most `timeoutSec`).
ternResult_t streamClose(Comm& c, const std::shared_ptr<StreamState>& s, double timeoutSec);

}  // namespace tern
