// A peer's descriptor heard on a stream before its operation's bytes: read
// past padding, checked against ours and consumed, and the descriptors a
// stream owes (StreamMarks::owed: descriptor-only receives a phase left to the
// stream's next reader, phaseThrough).
#pragma once
#include <string>

#include "engine/op_desc.h"
#include "engine/program.h"

namespace tern {

// Skips the padding at the head of `in` and reads (without consuming) the
// descriptor that follows, if it has arrived; false otherwise.  The ones the
// stream owes (StreamMarks::owed) are consumed first as they arrive and match;
// *owed: the head is an owed one that does not match (a mismatch to report).
// Only where a new operation starts on that stream (nobody is reading it).
// *bytes: the record's length on the stream (a whole descriptor, or a
// repeat of the last: op_desc.h, kRepeatTag), for takeDesc.
bool peekPast(Conn* in, OpDesc* d, bool* owed, size_t* bytes = nullptr);
// The same, for a look at what comes next (false also for a head that is
// not a descriptor).
bool peekDesc(Conn* in, OpDesc* d);

// Consumes the descriptor record of `bytes` peeked at the head of `in`,
// and keeps it as the one the next may repeat.
void takeDesc(Conn* in, const OpDesc& d, size_t bytes);
// Writes `d` at the tail of `out`, a repeat of the stream's last where it is
// one and `mayRepeat` (a plain step's), if the fifo has room; false if not.
bool putDesc(Conn* out, const OpDesc& d, bool mayRepeat);

// The peer's descriptor on `in` checked against `mine` and, when it
// matches, consumed (after the owed ones, see peekPast).  kNotYet also when
// another kind's interleaved message is ahead of it (its reader's).
enum class Heard { kNotYet, kMatched, kMismatch, kOwedMismatch };
Heard hear(Conn* in, const OpDesc& mine, OpDesc* theirs);
// ternInvalidUsage and the sentence for a mismatch hear() found.
ternResult_t heardError(Heard h, const Conn* in, const OpDesc& mine, const OpDesc& theirs);

// Whether a phase whose programs have run as far as they go is through:
// every program done, or done but for descriptor-only receives
// (Step::deferrable), whose descriptors its streams then owe (StreamMarks::owed).
// False (nothing owed) while one of those streams already owes
// OwedDescs::kMax: the rank has run that far ahead of its checks and waits.
// A plan hears a stream at most once per phase.
bool phaseThrough(Phase& ph, const OpDesc& desc);

}  // namespace tern
