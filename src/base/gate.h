// The gate of a listener: accepts connections and runs their authentication
// handshakes concurrently, each under its own short deadline
// (TERN_HANDSHAKE_TIMEOUT), so a stranger that connects and stays idle, or
// drips a byte now and then, holds only its own socket: it never delays the
// ranks behind it, and is dropped when its time is up.  Every turned-away
// connection is logged through base/reject_log.h.
#pragma once
#include <poll.h>

#include <deque>
#include <string>
#include <vector>

#include "base/auth.h"
#include "base/socket.h"

namespace tern {

// A connection that proved the job secret and sent its `trailerBytes`
// (what it is for: a rank's hello, a mesh slot).  fd is blocking again.
struct Admitted {
  int fd = -1;
  int rank = -1;  // as announced in the proof
  SockAddr from;
  std::string trailer;
};

class AuthGate {
 public:
  // Takes over `lfd` (made nonblocking; the caller still closes it).
  // `who` names the listener in the log ("bootstrap root", "rank 2").
  AuthGate(int lfd, const Secret& s, ConnKind kind, size_t trailerBytes, double handshakeSec,
           std::string who);
  ~AuthGate();  // drops the handshakes under way, reports the rejection counts
  AuthGate(const AuthGate&) = delete;
  AuthGate& operator=(const AuthGate&) = delete;

  // The next admitted connection; ternTimeout (with a sentence) once `d` passes.
  ternResult_t next(Deadline d, Admitted* out);
  // The same without an error once `d` passes (a listener that serves
  // connections now and then: false is no failure).  A `d` already passed
  // serves the bytes that are there without waiting for more.
  bool tryNext(Deadline d, Admitted* out);
  // The sockets of the handshakes under way (for a caller that polls them
  // with its own, and calls tryNext when one has bytes); true if any.
  bool addPollFds(std::vector<pollfd>* fds) const;
  // Turns an admitted connection away (a rank out of range, a slot taken): logged, closed.
  void refuse(Admitted& a, const std::string& why);

 private:
  struct Pending {
    int fd;
    SockAddr from;
    Deadline until;
    AuthChallenge challenge;
    std::string in;  // bytes of the current message so far
    bool proven = false;
    int rank = -1;
  };
  void acceptNew();
  // Reads what is there; false when the connection is to be dropped (*why says why).
  bool serve(Pending& p, const char** why);
  void drop(Pending& p, const std::string& why);
  void pollOnce(Deadline d);

  int lfd_;
  Secret secret_;
  ConnKind kind_;
  size_t trailerBytes_;
  double handshakeSec_;
  std::string who_;
  std::vector<Pending> pending_;
  std::deque<Admitted> ready_;
};

}  // namespace tern
