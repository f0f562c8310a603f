// Error reporting: every failing path records one human sentence and returns a
// ternResult_t.  TERN_CHECK propagates failures so each call site stays one line.
#pragma once
#include <cstdint>
#include <string>
#include "tern/tern.h"

namespace tern {

// Errors travel one way.  A failure is found on some thread and recorded
// there (setError: the thread's last error, logged at WARN); its code goes
// up the stack (TERN_CHECK) to the API call, which returns it, and
// ternGetLastError reads the calling thread's sentence.  What fails on
// another thread travels as a value to the thread that reports it: an
// operation's result and sentence (Operation::result, error) to the caller
// that waits for it, a communicator's failure (asyncError, its reason) to
// any call that finds it failed; that call records the sentence as its
// thread's.  No second copy is kept anywhere to be merged later.
//
// Records `msg` as the calling thread's last error (and logs it at WARN) and
// returns `code`, so callers can write `return setError(...)`.
ternResult_t setError(ternResult_t code, const std::string& msg);
// Like setError, with strerror(errno) appended.
ternResult_t setSysError(const std::string& what);
const std::string& lastThreadError();

}  // namespace tern

#define TERN_CHECK(call)                                   \
  do {                                                     \
    ternResult_t tern_res_ = (call);                       \
    if (tern_res_ != ternSuccess) return tern_res_;        \
  } while (0)

namespace tern {
// Sets the thread's last error without logging (a sentence that travelled
// here as a value and was logged where it happened, e.g. on the progress
// thread).
void setThreadError(const std::string& msg);
}  // namespace tern
