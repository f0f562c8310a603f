#include "base/reject_log.h"

#include <map>
#include <mutex>
#include <tuple>

#include "base/log.h"

namespace tern {

namespace {

struct Tally {
  Clock::time_point since;  // start of the current interval
  long unreported = 0;      // rejections since, not yet in a line
};

// Keyed by listener, peer host and reason: one process may run a root and
// several communicators' mesh listeners at once.
struct Key {
  std::string who, host, why;
  bool operator<(const Key& o) const {
    return std::tie(who, host, why) < std::tie(o.who, o.host, o.why);
  }
};

std::mutex mu;
std::map<Key, Tally> tallies;

void report(const Key& k, const Tally& t, Clock::time_point now) {
  double secs = std::chrono::duration<double>(now - t.since).count();
  TERN_LOG(Warn, "%s rejected %ld connection%s from %s in the last %.0f s: %s", k.who.c_str(),
           t.unreported, t.unreported == 1 ? "" : "s", k.host.c_str(), secs < 1 ? 1 : secs,
           k.why.c_str());
}

}  // namespace

void logRejected(const std::string& who, const SockAddr& from, const std::string& why) {
  Key k{who, from.host(), why};
  auto now = Clock::now();
  std::lock_guard<std::mutex> lk(mu);
  auto it = tallies.find(k);
  if (it == tallies.end()) {
    tallies[k] = Tally{now, 0};
    TERN_LOG(Warn, "%s rejected a connection from %s: %s (more from there are counted, "
                   "one line per %.0f s)",
             who.c_str(), from.str().c_str(), why.c_str(), kRejectLogIntervalSec);
    return;
  }
  Tally& t = it->second;
  ++t.unreported;
  if (std::chrono::duration<double>(now - t.since).count() < kRejectLogIntervalSec) return;
  report(k, t, now);
  t = Tally{now, 0};
}

void flushRejected(const std::string& who) {
  auto now = Clock::now();
  std::lock_guard<std::mutex> lk(mu);
  for (auto it = tallies.begin(); it != tallies.end();) {
    if (it->first.who != who) {
      ++it;
      continue;
    }
    if (it->second.unreported > 0) report(it->first, it->second, now);
    it = tallies.erase(it);
  }
}

}  // namespace tern
