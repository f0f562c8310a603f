// Shared-memory transport for ranks on one host.  Each direction is one
// POSIX shm segment holding a Fifo, created by its reader;
// the writer maps it after learning its name over the authenticated mesh
// socket.  Names are unlinked as soon as both sides have mapped them, so a
// crash never leaves anything behind in /dev/shm.  Each priority level has
// its own pair of segments, mapped without being faulted in: pages are
// faulted in as the fifo uses them (memory follows use, transport/fifo.h:
// an empty fifo restarts at its first pages).  Data crosses with one
// copy per hop (the sender writes into the reader's fifo; the reader reduces
// or copies straight out of it).
//
// Large plain transfers (Step::direct: send/recv, all-to-all, gather,
// scatter) skip the fifo when the kernel lets the ranks read each other's
// memory: the receiver copies straight from the sender's buffer with
// process_vm_readv (one copy instead of two) and counts what it read in an
// acknowledgement word behind the fifo, which the sender watches.  Whether
// that works (same user, ptrace permitted, one pid namespace) is probed when
// the connection is made, by reading a random value from the peer.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/auth.h"
#include "base/error.h"
#include "base/log.h"
#include "memory/memory.h"
#include "transport/fifo.h"
#include "transport/ll.h"
#include "transport/shm_streams.h"
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

ternResult_t mapSegment(const char* name, size_t bytes, bool create, Segment* seg) {
  int fd = shm_open(name, create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) return setSysError(std::string("shm_open(") + name + ") failed");
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ternResult_t r = setSysError(std::string("cannot size shared memory segment ") + name +
                                 " (is /dev/shm full?)");
    close(fd);
    shm_unlink(name);
    return r;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name);
    return setSysError(std::string("cannot map shared memory segment ") + name);
  }
  seg->mem = p;
  seg->bytes = bytes;
  return ternSuccess;
}

// Behind each fifo: the count of bytes its reader has read directly from the
// writer's memory, and the writer's word that it failed (its posted buffers
// are its caller's again: a read that ends after it may hold changed bytes).
// The receiver also marks the transfer it declined (`declined`: the ticket,
// i.e. the posted bytes up to its end: the sender streams that one), and
// the sender names the device buffer of the transfer it posts (one at a
// time; the fifo's head, published after, orders it).
struct DirectWord {
  alignas(64) std::atomic<uint64_t> acked;
  std::atomic<uint32_t> abandoned;
  std::atomic<uint64_t> declined;
  IpcHandle handle;
  uint64_t offset;
};

// A segment: the fifo, the small operations' LL ring (transport/ll.h), the
// direct word.
size_t segmentBytes(size_t fifoBytes) {
  return fifoFootprint(fifoBytes) + llFootprint() + sizeof(DirectWord);
}

void* llRing(const Segment& seg, size_t fifoBytes) {
  return static_cast<char*>(seg.mem) + fifoFootprint(fifoBytes);
}

DirectWord* directWord(const Segment& seg) {
  return reinterpret_cast<DirectWord*>(static_cast<char*>(seg.mem) + seg.bytes - sizeof(DirectWord));
}

// Reads n bytes at `addr` in process `pid` into dst; false with errno set.
bool readPeer(pid_t pid, void* dst, uint64_t addr, size_t n) {
  char* d = static_cast<char*>(dst);
  while (n > 0) {
    iovec local{d, n}, remote{reinterpret_cast<void*>(addr), n};
    ssize_t k = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    d += k;
    addr += static_cast<uint64_t>(k);
    n -= static_cast<size_t>(k);
  }
  return true;
}

class ShmConn : public Conn, public DirectCopy {
 public:
  const char* name() const override { return "shm"; }
  // The limit is agreed by open() on the table's opener thread: read only
  // once the connection is seen open (acquire).
  Conn* small(uint64_t opBytes) override {
    if (openState.load(std::memory_order_acquire) != kOpen) return nullptr;
    return smallUpTo() && opBytes <= smallUpTo() ? &ll_ : nullptr;
  }
  uint64_t smallUpTo() const override { return ll_.limit(); }
  LlConn ll_;
  ternResult_t read(void* dst, uint64_t addr, size_t n) override {
    if (readPeer(peerPid_, dst, addr, n)) return ternSuccess;
    if (errno == ESRCH) {
      gone = true;
      return setError(ternRemoteError, "rank " + std::to_string(peer) + " exited or failed while "
                                       "this rank read its buffer");
    }
    return setSysError("cannot read rank " + std::to_string(peer) + "'s buffer (process_vm_readv)");
  }
  void ack(size_t n) override {
    std::atomic<uint64_t>& w = directWord(recvSeg)->acked;
    w.store(w.load(std::memory_order_relaxed) + n, std::memory_order_release);
    countRecv(n);
  }
  uint64_t acked() const override {
    return directWord(sendSeg)->acked.load(std::memory_order_acquire);
  }
  void abandon() override {
    if (minBytes()) directWord(sendSeg)->abandoned.store(1, std::memory_order_seq_cst);
  }
  bool abandoned() const override {
    return directWord(recvSeg)->abandoned.load(std::memory_order_seq_cst) != 0;
  }
  size_t minBytes() const override {
    return hostMin_ && ipcMin_ ? std::min(hostMin_, ipcMin_) : std::max(hostMin_, ipcMin_);
  }
  size_t hostMinBytes() const override { return hostMin_; }
  size_t ipcMinBytes() const override { return ipcMin_; }
  void ipcPost(const IpcHandle& h, uint64_t offset) override {
    DirectWord* w = directWord(sendSeg);
    w->handle = h;
    w->offset = offset;
  }
  char* ipcMap(const MemOps& mem, size_t bytes, uint64_t* offset, std::string* why) override;
  void decline(uint64_t ticket, size_t n) override {
    DirectWord* w = directWord(recvSeg);
    w->declined.store(ticket, std::memory_order_relaxed);
    w->acked.store(w->acked.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }
  bool declined(uint64_t ticket) const override {
    return directWord(sendSeg)->declined.load(std::memory_order_relaxed) == ticket;
  }
  ~ShmConn() override {
    for (const auto& i : imports_) ipcRelease(i.first);
    if (peerPidfd_ >= 0) close(peerPidfd_);
  }
  // A pidfd is readable once its process has exited (zombie or reaped).
  bool peerExited() const override {
    pollfd p{peerPidfd_, POLLIN, 0};
    return peerGone() || (peerPidfd_ >= 0 && poll(&p, 1, 0) > 0);
  }
  int peerPidfd_ = -1;
  size_t hostMin_ = 0, ipcMin_ = 0;
  std::map<IpcHandle, char*> imports_;  // peer allocations opened here
  pid_t peerPid_ = 0;
  ternResult_t open(const ConnSetup& s) override;
  size_t recordAlign() const override { return ShmStreams::kRecordAlign; }
  size_t sendSpace(char** p) override { return io_.sendSpace(p); }
  void sendCommit(size_t n) override {
    io_.sendCommit(n);
    countSent(n);
  }
  size_t recvAvail(const char** p) override { return io_.recvAvail(p); }
  size_t recvAhead(const char** p) override { return io_.recvAhead(p); }
  void recvFound(const char* at, size_t n) override { io_.recvFound(at, n); }
  uint64_t sendPos() const override { return io_.sendPos(); }
  uint64_t recvPos() const override { return io_.recvPos(); }
  void recvConsume(size_t n) override {
    io_.recvConsume(n);
    countRecv(n);
  }

  Segment sendSeg, recvSeg;
  ShmStreams io_;
  ShmConn() {
    shm = &io_;
    direct = this;
  }
};

struct NameMsg {
  char name[64];
  uint64_t bytes;
  // The single-copy probe: read `probe` at probeAddr in process pid.
  int64_t pid;
  uint64_t probeAddr, probe[2], directMin;
  uint64_t llBytes;  // TERN_LL_BYTES: both ends use the smaller
  uint64_t ipcMin;   // TERN_SHM_IPC: both ends use the larger, 0 if either is off
};

// Whether this process may read the peer's memory (see the file comment).
bool probePeer(const NameMsg& theirs) {
  uint64_t got[2] = {0, 0};
  return theirs.directMin > 0 &&
         readPeer(static_cast<pid_t>(theirs.pid), got, theirs.probeAddr, sizeof got) &&
         got[0] == theirs.probe[0] && got[1] == theirs.probe[1];
}

}  // namespace

// Default-initialised, not value-initialised: the LL stream's private
// buffers (32 KiB per connection and level) stay untouched, so cost no
// memory, until the connection carries a small operation.
std::unique_ptr<Conn> makeShmConn(const ConnSetup&) { return std::unique_ptr<Conn>(new ShmConn); }

// Made when the level is first used (the connection table's opener thread):
// the names travel over the control channel's share for this level.
ternResult_t ShmConn::open(const ConnSetup& s) {
  size_t bytes = segmentBytes(s.cfg->fifoBytes);
  NameMsg mine{};
  mine.pid = getpid();
  mine.directMin = s.cfg->shmDirectBytes;
  mine.llBytes = s.cfg->llBytes;
  mine.ipcMin = s.cfg->shmIpcBytes;
  randomBytes(mine.probe, sizeof mine.probe);
  mine.probeAddr = reinterpret_cast<uintptr_t>(&mine.probe);  // read by the peer before it acks
  uint64_t nonce;
  randomBytes(&nonce, sizeof nonce);
  snprintf(mine.name, sizeof mine.name, "/tern-%d-%d-%d-%d-%016llx", (int)getpid(), s.rank, s.peer,
           s.level, (unsigned long long)nonce);
  mine.bytes = bytes;
  TERN_CHECK(mapSegment(mine.name, bytes, true, &recvSeg));
  io_.recv.attach(recvSeg.mem, s.cfg->fifoBytes, s.cfg->fifoGranule, true);

  // Exchange names; each side maps the other's segment, then acknowledges.
  NameMsg theirs{};
  ternResult_t r = s.ch->send(&mine, sizeof mine, s.deadline);
  if (r == ternSuccess) r = s.ch->recv(&theirs, sizeof theirs, s.deadline);
  theirs.name[sizeof theirs.name - 1] = '\0';
  if (r == ternSuccess && theirs.bytes != bytes)
    r = setError(ternInvalidUsage, "ranks " + std::to_string(s.rank) + " and " +
                                       std::to_string(s.peer) +
                                       " disagree on TERN_BUFFSIZE; set it the same everywhere");
  if (r == ternSuccess) r = mapSegment(theirs.name, bytes, false, &sendSeg);
  // The acknowledgement says whether we could read the peer's memory.
  char ack = static_cast<char>(1 | (r == ternSuccess && mine.directMin > 0 && probePeer(theirs) ? 2 : 0)), peerAck = 0;
  if (r == ternSuccess) r = s.ch->send(&ack, 1, s.deadline);
  if (r == ternSuccess) r = s.ch->recv(&peerAck, 1, s.deadline);
  shm_unlink(mine.name);
  TERN_CHECK(r);
  if ((ack & 2) && (peerAck & 2)) {
    hostMin_ = std::max<size_t>(mine.directMin, theirs.directMin);
    peerPid_ = static_cast<pid_t>(theirs.pid);
  }
  if (mine.ipcMin && theirs.ipcMin) ipcMin_ = std::max<size_t>(mine.ipcMin, theirs.ipcMin);
  if (minBytes()) peerPidfd_ = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(theirs.pid), 0));
  io_.send.attach(sendSeg.mem, s.cfg->fifoBytes, s.cfg->fifoGranule, false);
  io_.send.setWindow(s.cfg->fifoWindow);  // the producer's choice alone
  ll_.attach(this, llRing(recvSeg, s.cfg->fifoBytes), llRing(sendSeg, s.cfg->fifoBytes),
             std::min<uint64_t>(mine.llBytes, theirs.llBytes));
  TERN_LOG(Trace, "shm connection to rank %d at level %d (%zu-byte fifos, single copy %s, device IPC %s)",
           s.peer, s.level, s.cfg->fifoBytes, hostMin_ ? "on" : "off", ipcMin_ ? "on" : "off");
  return ternSuccess;
}

// The handle the sender named (DirectWord), opened once per connection.
// Before opening another, the allocations the peer has freed since are let
// go: a loop that allocates afresh each time would otherwise keep every one
// it ever sent mapped here.
char* ShmConn::ipcMap(const MemOps& mem, size_t bytes, uint64_t* offset, std::string* why) {
  const DirectWord* w = directWord(recvSeg);
  const IpcHandle h = w->handle;
  *offset = w->offset;
  // A receiver maps only its own kind: the process-wide table of opened
  // handles (memory/ipc.h) may hold another kind's under this one.
  if (h.type != static_cast<uint32_t>(mem.type())) {
    *why = std::string("the peer's buffer is ") + memTypeName(static_cast<MemType>(h.type)) +
           " memory and this rank's is " + memTypeName(mem.type());
    return nullptr;
  }
  if (*offset > h.size || bytes > h.size - *offset) {
    *why = "rank " + std::to_string(peer) + " named a buffer that runs past its allocation";
    return nullptr;
  }
  auto it = imports_.find(h);
  if (it != imports_.end()) return it->second;
  for (auto i = imports_.begin(); i != imports_.end();) {
    if (!mem.ipcStale(i->first)) {
      ++i;
      continue;
    }
    ipcRelease(i->first);
    i = imports_.erase(i);
  }
  char* base = static_cast<char*>(mem.ipcOpen(h, why));
  if (base) imports_.emplace(h, base);
  return base;
}

}  // namespace tern
