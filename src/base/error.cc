#include "base/error.h"

#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace tern {

static thread_local std::string tlsLastError;

ternResult_t setError(ternResult_t code, const std::string& msg) {
  setThreadError(msg);
  // Logged without a source location: error.cc's would say nothing.
  if (logLevel() >= LogLevel::Warn)
    logLine(LogLevel::Warn, nullptr, 0, "%s (%s)", msg.c_str(), ternGetErrorString(code));
  return code;
}

ternResult_t setSysError(const std::string& what) {
  int e = errno;
  return setError(ternSystemError, what + ": " + std::strerror(e));
}

const std::string& lastThreadError() { return tlsLastError; }
void setThreadError(const std::string& msg) { tlsLastError = msg; }

}  // namespace tern

extern "C" const char* ternGetErrorString(ternResult_t r) {
  switch (r) {
    case ternSuccess: return "no error";
    case ternUnhandledCudaError: return "unhandled cuda error";
    case ternSystemError: return "unhandled system error";
    case ternInternalError: return "internal error";
    case ternInvalidArgument: return "invalid argument";
    case ternInvalidUsage: return "invalid usage";
    case ternRemoteError: return "remote process exited or there was a network error";
    case ternInProgress: return "operation in progress";
    case ternTimeout: return "operation timed out";
  }
  return "unknown result code";
}
