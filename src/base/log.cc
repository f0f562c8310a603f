#include "base/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/env.h"

namespace tern {

static thread_local int tlsRank = -1;

LogLevel logLevel() {
  static const LogLevel level = [] {
    std::string v = envString("TERN_DEBUG", "");
    for (auto& c : v) c = static_cast<char>(toupper(c));
    if (v == "TRACE") return LogLevel::Trace;
    if (v == "INFO") return LogLevel::Info;
    if (v == "NONE" || v == "OFF") return LogLevel::None;
    return LogLevel::Warn;  // errors and rejected strangers are always worth a line
  }();
  return level;
}

void setLogRank(int rank) { tlsRank = rank; }

void logLine(LogLevel level, const char* file, int line, const char* fmt, ...) {
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char where[64] = "";
  if (file) {
    const char* base = strrchr(file, '/');
    snprintf(where, sizeof where, "%s:%d ", base ? base + 1 : file, line);
  }
  char rank[16] = "-";
  if (tlsRank >= 0) snprintf(rank, sizeof rank, "%d", tlsRank);
  // One fprintf per line so lines from threads never interleave mid-line.
  fprintf(stderr, "%s:%d [%s] TERN %s %s%s\n", host, (int)getpid(), rank,
          names[static_cast<int>(level)], where, msg);
}

}  // namespace tern
