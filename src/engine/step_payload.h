// A step's payload bytes: reduced or copied between the fifos and the
// caller's buffers (executeStep), moved without staging where a connection
// offers it, and, for an asynchronous memory type, parked until its fence
// is done (settle).  advance (program.cc) calls them once a step's lead
// (padding, descriptor, headers) is through.
#pragma once
#include "engine/program.h"

namespace tern {

// One step's work on n payload bytes from offset `off`: `in` (received, or
// nullptr) reduced with or copied beside the step's local bytes into its
// destination and / or `out` (the send side's fifo, or nullptr).
void executeStep(const MemOps& mem, const Step& s, const char* in, char* out, size_t off, size_t n,
                 const Reduction& red, int nranks);
// Moves as much payload as the fifos allow (up to `limit` bytes); returns the
// units moved (bytes for dense steps, groups for codec steps).
size_t payload(const MemOps& mem, Program& p, const Step& s, const Reduction& red, int nranks,
               size_t limit);
// An asynchronous burst (payload above) once its fence is done: its fifo
// bytes go to the transport and its units count.  False while it runs.
bool settle(const MemOps& mem, Program& p, const Step& s);

}  // namespace tern
