// Rejected connections, logged without letting a flood of strangers flood the
// log: the first rejection of a kind from a peer address is one WARN line,
// later ones within the interval are only counted and reported as one line
// ("bootstrap root rejected 250 connections from 127.0.0.1 in the last 10 s:
// bad secret").  Every place that turns a connection away logs through here.
#pragma once
#include <string>

#include "base/socket.h"

namespace tern {

constexpr double kRejectLogIntervalSec = 10;

// `who` names the listener ("bootstrap root", "rank 3"), `why` the reason.
void logRejected(const std::string& who, const SockAddr& from, const std::string& why);
// Reports the counts not yet reported for `who` (its listener is closing).
void flushRejected(const std::string& who);

}  // namespace tern
