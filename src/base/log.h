// TERN_DEBUG=WARN|INFO|TRACE logging: one line per event on stderr, prefixed
// with host, pid and (once known) the rank, like NCCL_DEBUG.
#pragma once

namespace tern {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

LogLevel logLevel();
// The rank shown in this thread's log prefix (-1: not yet known).
void setLogRank(int rank);
void logLine(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace tern

#define TERN_LOG(lvl, ...)                                                        \
  do {                                                                           \
    if (::tern::logLevel() >= ::tern::LogLevel::lvl)                             \
      ::tern::logLine(::tern::LogLevel::lvl, __FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)
