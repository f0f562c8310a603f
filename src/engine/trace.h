// TERN_TRACE=FILE: a Chrome / Perfetto trace (JSON) of every operation of a
// communicator: kind, bytes, level, flow class, peer, and when it was issued,
// began and completed, so a user sees in a trace viewer that urgent work
// overtook bulk work.  One file per rank ("%r" in FILE is the rank, else
// FILE.rank<R>.json; a process's k-th communicator after the first adds
// .comm<k>), written when the communicator is destroyed or aborted.
// The format is documented in docs/ENV.md (TERN_TRACE).
//
// Cost: nothing unless TERN_TRACE is set (the hooks test a null pointer).
// When set, each event takes one uncontended mutex (the issuing thread and
// the driver rarely meet) and the buffer is bounded: past TERN_TRACE_EVENTS
// operations (default 100000) later ones are counted, not kept.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/operation.h"

namespace tern {

class Trace {
 public:
  // The trace TERN_TRACE asks for, or null when it is unset.  classOf[L] is
  // the flow class of level L (the communicator's mapping).
  static std::unique_ptr<Trace> fromEnv(int rank, const int classOf[TERN_PRIORITY_LEVELS]);

  void issued(const Operation& op);     // handed to the executor (any thread)
  void started(const Operation& op);    // its first phase began (the driver)
  void completed(const Operation& op);  // done, with its result (the driver)
  // Writes the file; true when written.  Called once, at destroy or abort.
  bool write();

  std::string path() const { return path_; }

 private:
  struct Event {
    const char* kind;
    uint64_t bytes, seq;
    int level, peer, result;
    int64_t issueUs, startUs, endUs;
  };
  Trace(std::string path, int rank, const int classOf[TERN_PRIORITY_LEVELS], size_t cap);
  void writeEvent(FILE* f, const Event& e) const;

  const std::string path_;
  const int rank_;
  int classOf_[TERN_PRIORITY_LEVELS];
  const size_t cap_;
  std::mutex mu_;
  // Issued and not yet completed: issue and start times (operations are
  // reused after completion, so the key is live only in between).
  std::unordered_map<const Operation*, std::pair<int64_t, int64_t>> open_;
  std::vector<Event> done_;
  uint64_t dropped_ = 0;
};

}  // namespace tern
