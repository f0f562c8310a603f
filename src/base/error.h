// Error reporting: every failing path records one human sentence and returns a
// ternResult_t.  TERN_CHECK propagates failures so each call site stays one line.
#pragma once
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
