// Shared-memory transport for ranks on one host.  Each direction is one
// POSIX shm segment holding a Fifo, created (and pre-faulted) by its reader;
// the writer maps it after learning its name over the authenticated mesh
// socket.  Names are unlinked as soon as both sides have mapped them, so a
// crash never leaves anything behind in /dev/shm.  Each priority level has
// its own pair of segments; those of levels not yet used are mapped without
// being faulted in (activate() does it on first use).  Data crosses with one
// copy per hop (the sender writes into the reader's fifo; the reader reduces
// or copies straight out of it).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/auth.h"
#include "base/error.h"
#include "base/log.h"
#include "transport/fifo.h"
#include "transport/transport.h"

namespace tern {

namespace {

struct Segment {
  void* mem = nullptr;
  size_t bytes = 0;
  ~Segment() {
    if (mem) munmap(mem, bytes);
  }
};

ternResult_t mapSegment(const char* name, size_t bytes, bool create, bool populate, Segment* seg) {
  int fd = shm_open(name, create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) return setSysError(std::string("shm_open(") + name + ") failed");
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ternResult_t r = setSysError(std::string("cannot size shared memory segment ") + name +
                                 " (is /dev/shm full?)");
    close(fd);
    shm_unlink(name);
    return r;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0),
                 fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name);
    return setSysError(std::string("cannot map shared memory segment ") + name);
  }
  seg->mem = p;
  seg->bytes = bytes;
  return ternSuccess;
}

// Faults every page of a mapping in by reading it: safe while the peer may
// already be writing (a write would clobber its bytes).
void touch(const Segment& seg) {
  const volatile char* p = static_cast<const volatile char*>(seg.mem);
  for (size_t off = 0; off < seg.bytes; off += 4096) (void)p[off];
}

class ShmConn : public Conn {
 public:
  const char* name() const override { return "shm"; }
  ternResult_t activate() override {
    if (!touched_) {
      touch(recvSeg);
      touch(sendSeg);
      touched_ = true;
    }
    return ternSuccess;
  }
  bool touched_ = false;
  size_t sendSpace(char** p) override { return send_.writable(p); }
  void sendCommit(size_t n) override {
    send_.produce(n);
    countSent(n);
  }
  size_t recvAvail(const char** p) override { return recv_.readable(p); }
  uint64_t sendPos() const override { return send_.produced(); }
  uint64_t recvPos() const override { return recv_.consumed(); }
  void recvConsume(size_t n) override {
    recv_.consume(n);
    countRecv(n);
  }

  Segment sendSeg, recvSeg;
  Fifo send_, recv_;
};

struct NameMsg { char name[64]; uint64_t bytes; };

}  // namespace

ternResult_t makeShmConn(const ConnSetup& s, std::unique_ptr<Conn>* out) {
  auto c = std::make_unique<ShmConn>();
  size_t bytes = fifoFootprint(s.cfg->fifoBytes);
  NameMsg mine{};
  uint64_t nonce;
  randomBytes(&nonce, sizeof nonce);
  snprintf(mine.name, sizeof mine.name, "/tern-%d-%d-%d-%d-%016llx", (int)getpid(), s.rank, s.peer,
           s.level, (unsigned long long)nonce);
  mine.bytes = bytes;
  c->touched_ = !s.lazy;
  TERN_CHECK(mapSegment(mine.name, bytes, true, !s.lazy, &c->recvSeg));
  c->recv_.attach(c->recvSeg.mem, s.cfg->fifoBytes, true);

  // Exchange names; each side maps the other's segment, then acknowledges.
  NameMsg theirs{};
  ternResult_t r = sendAll(s.meshFd, &mine, sizeof mine, s.deadline);
  if (r == ternSuccess) r = recvAll(s.meshFd, &theirs, sizeof theirs, s.deadline);
  theirs.name[sizeof theirs.name - 1] = '\0';
  if (r == ternSuccess && theirs.bytes != bytes)
    r = setError(ternInvalidUsage, "ranks " + std::to_string(s.rank) + " and " +
                                       std::to_string(s.peer) +
                                       " disagree on TERN_BUFFSIZE; set it the same everywhere");
  if (r == ternSuccess) r = mapSegment(theirs.name, bytes, false, !s.lazy, &c->sendSeg);
  char ack = 1, peerAck = 0;
  if (r == ternSuccess) r = sendAll(s.meshFd, &ack, 1, s.deadline);
  if (r == ternSuccess) r = recvAll(s.meshFd, &peerAck, 1, s.deadline);
  shm_unlink(mine.name);
  TERN_CHECK(r);
  c->send_.attach(c->sendSeg.mem, s.cfg->fifoBytes, false);
  TERN_LOG(Trace, "shm connection to rank %d at level %d (%zu-byte fifos)", s.peer, s.level,
           s.cfg->fifoBytes);
  *out = std::move(c);
  return ternSuccess;
}

}  // namespace tern
