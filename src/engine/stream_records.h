// Padding and fixed-size records on a stream: what comes before a step's
// payload (engine/program.cc, prologue) and what a reader peeks at before it
// knows whose message comes (engine/descriptors.cc).  Inline: they run once
// or twice per step on every path.
#pragma once
#include <algorithm>
#include <cstring>

#include "transport/transport.h"

namespace tern {

// Skips up to *left bytes of padding on the receive side / emits them on the
// send side, as far as the fifo allows.
inline void skipIn(Conn* c, size_t* left) {
  const char* p;
  size_t k;
  while (*left > 0 && (k = std::min(c->recvAvail(&p), *left)) > 0) {
    c->recvConsume(k);
    *left -= k;
  }
}

inline void padOut(Conn* c, size_t* left) {
  char* p;
  size_t k;
  while (*left > 0 && (k = std::min(c->sendSpace(&p), *left)) > 0) {
    c->sendCommit(k);
    *left -= k;
  }
}

// A fixed-size record on a stream (descriptor, header): written whole once
// the fifo has room for it, read (not yet consumed) once it has arrived.
// Records are aligned on the stream, so none straddles the wrap point.
template <class T>
bool putRecord(Conn* out, const T& v) {
  char* o;
  if (out->sendSpace(&o) < sizeof v) return false;
  memcpy(o, &v, sizeof v);
  out->sendCommit(sizeof v);
  return true;
}

template <class T>
bool peekRecord(Conn* in, T* v) {
  const char* ip;
  if (in->recvAvail(&ip) < sizeof *v) return false;
  memcpy(v, ip, sizeof *v);
  return true;
}

}  // namespace tern
