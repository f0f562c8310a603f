// Error reporting: every failing path records one human sentence and returns a
// ternResult_t.  TERN_CHECK propagates failures so each call site stays one line.
#pragma once
#include <cstdint>
#include <string>
#include "tern/tern.h"

namespace tern {

// Records `msg` as the calling thread's last error (and logs it at WARN) and
// returns `code`, so callers can write `return setError(...)`.
ternResult_t setError(ternResult_t code, const std::string& msg);
// Like setError, with strerror(errno) appended.
ternResult_t setSysError(const std::string& what);
const std::string& lastThreadError();
void clearThreadError();
// Every recorded error (the thread's here, a communicator's in comm.cc) is
// stamped from one process-wide counter, so ternGetLastError can tell which
// of a thread's and a communicator's sentences is the newer.
uint64_t nextErrorStamp();
uint64_t lastThreadErrorStamp();

}  // namespace tern

#define TERN_CHECK(call)                                   \
  do {                                                     \
    ternResult_t tern_res_ = (call);                       \
    if (tern_res_ != ternSuccess) return tern_res_;        \
  } while (0)

namespace tern {
// Sets the thread's last error without logging (for errors already logged
// where they happened, e.g. on the progress thread).
void setThreadError(const std::string& msg);
}  // namespace tern
