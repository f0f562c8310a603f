// The transport interface: a Conn is a bidirectional, ordered byte stream to
// one peer, exposed as two fifos so that collectives can reduce straight out
// of the receive buffer and into the send buffer (one pass, no staging copy on
// shm).  Transports know bytes only: no datatypes, no reductions.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/env.h"
#include "base/socket.h"
#include "transport/fifo.h"
#include "tern/tern.h"

namespace tern {

struct ConnSetup;
class Conn;
class MemOps;
struct ShmStreams;
struct IpcHandle;

// What opens connections on first use (transport/conn_table.h).
class ConnOpener {
 public:
  virtual ~ConnOpener() = default;
  // Starts opening `c` unless it is open or under way; *ready when it is open.
  virtual ternResult_t request(Conn& c, bool* ready) = 0;
  // The connection to `peer` at `level`, made now (unopened) if no one asked
  // for it before: a connection object exists only for the (peer, level)
  // pairs a rank talks on, not for every one at init.
  virtual Conn* make(int peer, int level) = 0;
};

// One level's connections as plans see them (self included): made[peer] once
// made, null before; at() makes it on first ask.
struct LevelConns {
  std::unique_ptr<std::atomic<Conn*>[]> made;
  ConnOpener* maker = nullptr;
  int level = 0;
  Conn* at(int peer) const {
    Conn* c = made[peer].load(std::memory_order_acquire);
    return __builtin_expect(c != nullptr, 1) ? c : makeNow(peer);
  }
  // Out of line and cold: plans on the small path inline at() and keep
  // their registers.
  [[gnu::cold, gnu::noinline]] Conn* makeNow(int peer) const;
  Conn* ifMade(int peer) const { return made[peer].load(std::memory_order_acquire); }
};

// Single copy between ranks of one host (shm).  A direct step
// (Step::direct) of at least minBytes() carries a header, and its payload
// may skip the fifo: the sender posts its buffer and waits; the receiver
// copies straight out of it and acknowledges what it read, or declines (its
// buffer is of the other kind, IPC failed) and the payload streams after
// all.  Host buffers are read with process_vm_readv from hostMinBytes(),
// device buffers and host ones from ternMemAlloc over IPC (memory/ipc.h)
// from ipcMinBytes(); minBytes() is the smaller of those that are on.  Both
// ends of a connection agree on all three when it opens (0: never).
class DirectCopy {
 public:
  virtual ~DirectCopy() = default;
  virtual size_t minBytes() const = 0;
  virtual size_t hostMinBytes() const = 0;
  virtual size_t ipcMinBytes() const = 0;
  // Sender: the device buffer of the transfer it posts next (one at a
  // time: it waits until the earlier ones were acknowledged).
  virtual void ipcPost(const IpcHandle& h, uint64_t offset) = 0;
  // Receiver: the posted buffer's allocation mapped here (opened by `mem`
  // on first use, kept until the connection closes or its exporter frees
  // it) and the buffer's offset in it; nullptr and *why when it cannot be
  // opened or its `bytes` do not lie inside it.
  virtual char* ipcMap(const MemOps& mem, size_t bytes, uint64_t* offset, std::string* why) = 0;
  // Receiver: declines the posted transfer of n bytes that ends at `ticket`
  // (the bytes of posted transfers announced so far; it streams instead).
  // Sender: whether the receiver declined the one that ends at `ticket`.
  virtual void decline(uint64_t ticket, size_t n) = 0;
  virtual bool declined(uint64_t ticket) const = 0;
  // Receiver: whether the sender has exited or failed, asked now (not only
  // as the connection table last saw it): a read of its buffer that ended
  // after that may hold invalid bytes.
  virtual bool peerExited() const = 0;
  // Receiver: copies n bytes at the peer's address `addr` into dst.
  virtual ternResult_t read(void* dst, uint64_t addr, size_t n) = 0;
  // Receiver: n more bytes were read.  Sender: bytes read so far in total.
  virtual void ack(size_t n) = 0;
  virtual uint64_t acked() const = 0;
  // Sender: this rank failed, so buffers it posted may change from now on.
  // Receiver: whether the sender said so (what was read may be invalid).
  virtual void abandon() = 0;
  virtual bool abandoned() const = 0;
};

// Unstaged plain transfers (tcp): a send-only step of at least minBytes()
// (0: never) hands the kernel the caller's bytes and a receive-only one takes
// them from the kernel into the caller's buffer, instead of each copying
// through its staging fifo (a memory pass per byte fewer on each side, where
// the kernel's own copies already bound the rate).  Each moves at most n
// bytes now and returns how many (0: not now: bytes staged earlier go first,
// the socket is full or empty); the stream positions move as if the bytes
// had gone through the fifo.  `more`: bytes of the step still due after
// these (the receiver then leaves them in the kernel for the step instead of
// staging them).  Each end decides alone: the bytes on the wire are the
// same either way.
class UnstagedIo {
 public:
  virtual ~UnstagedIo() = default;
  virtual size_t minBytes() const = 0;
  virtual size_t send(const char* src, size_t n) = 0;
  virtual size_t recv(char* dst, size_t n, size_t more) = 0;
};

class Conn {
 public:
  virtual ~Conn() = default;
  virtual const char* name() const = 0;
  // What the transport made this connection's endpoint with, as text (ucx:
  // its flow class's context config, IB service level and traffic class
  // included); empty where there is nothing beyond FlowMark.  For tests
  // and TRACE logs.
  virtual std::string endpointSettings() const { return ""; }

  // Send side: contiguous free space (may be 0), then commit what was written.
  virtual size_t sendSpace(char** p) = 0;
  virtual void sendCommit(size_t n) = 0;
  // Where a message's descriptor starts on the stream (a multiple of this,
  // and never across a multiple of 4 KiB: recordSkip, engine/program.h).
  // Shared memory packs small messages with 8; the LL stream gathers into a
  // private buffer and needs only 8 too (no padding to send).
  virtual size_t recordAlign() const { return 32; }
  // Makes what was committed visible to the peer (the LL stream gathers a
  // message's commits into one store per line; others publish on commit).
  // The engine calls it whenever it stops writing (advance's return).
  virtual void flush() {}
  // Receive side: contiguous received bytes (may be 0), then release them.
  virtual size_t recvAvail(const char** p) = 0;
  virtual void recvConsume(size_t n) = 0;
  // Stream positions (bytes committed / consumed since the connection began).
  virtual uint64_t sendPos() const = 0;
  virtual uint64_t recvPos() const = 0;

  // Moves bytes between the fifos and the wire.  Sets *moved when anything
  // moved.  A closed or broken connection is ternRemoteError.
  virtual ternResult_t progress(bool* moved) {
    *moved = false;
    return ternSuccess;
  }
  // True when every committed byte has left this process (handed to the
  // kernel or to shared memory).
  virtual bool flushed() const { return true; }
  // Bytes handed to the kernel that the peer has not acknowledged yet (tcp:
  // the socket's send queue, in flight and in the qdisc included); 0 where
  // there is no such queue.  A bulk sender that keeps it short leaves the
  // link to a more urgent level as soon as that one moves.
  virtual size_t kernelQueued() const { return 0; }
  // Set by the engine before each progress() (driving thread only): this
  // connection's level is less urgent than one in use (Executor::urgentInUse), so
  // a transport with a kernel queue keeps it short (tcp: TERN_BULK_QUEUED).
  bool bulk = false;
  // Set with `bulk`: another level has work on this rank (more or less
  // urgent).  A send-only step then stages its payload rather than handing
  // the kernel the caller's buffer (engine/step_payload.cc, unstagedPayload):
  // the step would hold its program until the kernel took every byte, and a
  // ring's next receive waits behind it.
  bool mixed = false;
  // Whether an idle wait should wake when the endpoint can take more bytes
  // (poll's POLLOUT): committed bytes wait, and nothing but the kernel's
  // room holds them back (tcp: not the bulk bound, which poll cannot see).
  virtual bool wantsWritable() const { return !flushed(); }
  // Whether the bulk bound held bytes back on the last push (staged ones or
  // an unstaged step's): poll cannot see the kernel's queue drain, so an
  // idle wait looks again after this many nanoseconds (0: not capped).
  virtual long cappedRecheckNs() const { return 0; }
  // A socket to poll while idle, or -1 when the transport cannot be polled.
  virtual int pollFd() const { return -1; }
  // Whether progress() must be called to move bytes (tcp, ucx; not shm).
  virtual bool needsProgress() const { return pollFd() >= 0; }
  // A connection exists from the communicator's creation but unopened: no
  // socket, segment or endpoint, no memory.  The connection table opens it
  // (on a thread of its own, blocking until s.deadline) on its first use or
  // when the peer asks: open() makes the endpoint with the peer, over the
  // control channel s.ch; activate() then maps its staging buffers (their
  // pages are faulted in as the fifos use them, transport/fifo.h).  So a
  // job's sockets and memory follow the levels and peers it talks to and the
  // bytes it has in flight.
  virtual ternResult_t open(const ConnSetup& s) {
    (void)s;
    return ternSuccess;
  }
  virtual ternResult_t activate() { return ternSuccess; }
  // Before the engine touches the connection: *ready once it is open; until
  // then the step waits (nothing else is held up).  An error when it cannot
  // be opened (the peer died, refused or stayed silent past TERN_TIMEOUT).
  ternResult_t use(bool* ready) {
    *ready = openState.load(std::memory_order_acquire) == kOpen;
    return *ready ? ternSuccess : opener->request(*this, ready);
  }
  enum OpenState : int { kUnopened, kOpening, kOpen, kFailed };
  std::atomic<int> openState{kUnopened};
  // What the small path asks of each step's connections, read once when the
  // connection has opened (ConnTable::finish, before openState turns kOpen)
  // rather than through three virtual calls per step: whether it moves bytes
  // without pumps and takes an operation of `opBytes` on this stream (not
  // its low-latency sibling), and from how many bytes a direct step may skip
  // the fifo (DirectCopy::minBytes).
  void settle() {
    pumpFree_ = !needsProgress();
    siblingUpTo_ = smallUpTo();
    directFrom_ = direct ? direct->minBytes() : 0;
  }
  bool carriesWhole(uint64_t opBytes) const { return pumpFree_ && !(siblingUpTo_ && opBytes <= siblingUpTo_); }
  size_t directFrom() const { return directFrom_; }
  ConnOpener* opener = nullptr;
  int level = 0;

  // Optional capabilities, each an interface of its own that the transport
  // that has it implements, set once when the connection is made (null:
  // not this transport's); what both ends agreed for them (their
  // thresholds) is known once it has opened.
  DirectCopy* direct = nullptr;   // single copy and CUDA IPC (shm)
  UnstagedIo* unstaged = nullptr; // plain transfers past the staging fifo (tcp)
  // The low-latency sibling stream to the same peer at the same level
  // (transport/ll.h) for an operation of `opBytes` (both ends agree on the
  // limit), or nullptr: the operation stays on this one.
  virtual Conn* small(uint64_t opBytes) {
    (void)opBytes;
    return nullptr;
  }
  virtual uint64_t smallUpTo() const { return 0; }  // the largest opBytes small() takes (0: none)
  // Where the stream's next bytes will lie once they come, and the
  // contiguous room there (0: not foreseeable), without looking at what has
  // arrived: a reader that can tell a whole message by its last word (the
  // small path's descriptors, kSeqWhole) polls that line instead of the
  // fifo's head.  recvFound(at, n): the n bytes recvAhead showed at `at`
  // were found whole (before recvConsume, as after a recvAvail that showed
  // them).
  virtual size_t recvAhead(const char** p) {
    (void)p;
    return 0;
  }
  virtual void recvFound(const char* at, size_t n) { (void)at, (void)n; }
  // A shared-memory connection's fifos (transport/shm_streams.h), which its
  // stream methods above are; nullptr for other transports.  The small path
  // calls them directly (engine/inline_runner.cc).
  ShmStreams* shm = nullptr;
  // A sibling's connection (nullptr: this is one): its liveness is ours.
  Conn* owner = nullptr;
  bool peerGone() const { return gone || (owner && owner->gone); }
  // Nothing more will arrive beyond what recvAvail shows now.  The peer's
  // exit (`gone`, which the connection table sets as soon as the control
  // socket closes) is enough where its bytes land in our memory directly
  // (shm); tcp overrides it: what the peer sent before it exited may still
  // wait in the kernel until this end reads to its own end of stream; so
  // does UCX, whose worker holds it until progressed (ucx.cc).
  virtual bool inputEnded() const { return peerGone(); }

  // What the layer that drives this connection keeps with it, per stream
  // (the engine's marks: which operation reads and writes it, the
  // descriptors it owes; engine/stream_marks.h): made by that layer on first
  // use and freed with the connection.  Transports never look inside.
  struct Attached {
    virtual ~Attached() = default;
  };
  std::unique_ptr<Attached> attached;

  int peer = -1;  // the rank at the other end
  // The peer closed its end (exited or failed).  Not an error by itself: a
  // peer may finish and exit while we still drain what it sent; it is one
  // when a step is blocked on this connection (see Executor::checkIdle).
  std::atomic<bool> gone{false};
  // Read by statistics calls on other threads while traffic runs.
  std::atomic<uint64_t> bytesSent{0}, bytesRecv{0};
  uint64_t bytesUnstaged = 0;  // of those, sent or received unstaged (driving thread only)
  int flowClass = 0;  // the flow class of the level it carries (statistics per class)
  // One writer (the driving thread): no locked add needed.
  void countSent(uint64_t n) { bytesSent.store(bytesSent.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void countRecv(uint64_t n) { bytesRecv.store(bytesRecv.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }

 private:
  bool pumpFree_ = false;  // settle()
  uint64_t siblingUpTo_ = 0;
  size_t directFrom_ = 0;
};

// A connection that moves no bytes: the base of stand-ins that only need a
// connection's identity (a build without UCX, the plan checker's streams).
class InertConn : public Conn {
 public:
  size_t sendSpace(char**) override { return 0; }
  void sendCommit(size_t) override {}
  size_t recvAvail(const char**) override { return 0; }
  void recvConsume(size_t) override {}
  uint64_t sendPos() const override { return 0; }
  uint64_t recvPos() const override { return 0; }
};

// The flow class a connection carries and how its packets are marked
// (decided by comm/config.cc from TERN_FLOW_DSCP / ternConfig_t).
struct FlowMark {
  int flowClass = 0;   // 0 = most urgent
  int dscp = 0;        // 0..63; 0 = unmarked
  int soPriority = 0;  // SO_PRIORITY set after IP_TOS
  // ucx: the class's context's UCX_IB_SL / UCX_IB_TRAFFIC_CLASS (-1: UCX's own).
  int ibSl = -1;
  int ibTrafficClass = -1;
};

// One (peer, level)'s share of the control socket while its connection
// opens (framed by the connection table: its messages never mix with
// another level's or with failure notices).
class Channel {
 public:
  virtual ~Channel() = default;
  virtual ternResult_t send(const void* p, size_t n, Deadline d) = 0;
  virtual ternResult_t recv(void* p, size_t n, Deadline d) = 0;
  // tcp, lower rank: a socket for this level dialled to the peer's
  // listener and authenticated; a communicator that fails or closes ends
  // the dial at once (the table owns every dial).
  virtual ternResult_t dial(Deadline d, int* fd) = 0;
  // tcp, higher rank: the socket the peer dialled to our listener for this
  // level, once the table's gate has authenticated it.
  virtual ternResult_t accepted(Deadline d, int* fd) = 0;
};

// Each priority level has its own connection to each peer (see
// docs/DECISIONS.md, "One connection per peer and priority level").
struct ConnSetup {
  int rank, peer;      // this rank and the peer
  int level;           // priority level this connection carries
  const Config* cfg;
  Deadline deadline;   // open(): the whole opening
  FlowMark mark{};     // tcp marks its socket with it
  Channel* ch = nullptr;  // open(): the control channel's share for (peer, level)
};

// Unopened connections (Conn::open makes the endpoint).
// shm: two segments, one per direction, each created by its reader.
std::unique_ptr<Conn> makeShmConn(const ConnSetup& s);
// tcp: the level's socket, dialled by the lower rank, nonblocking, with
// private staging fifos.
std::unique_ptr<Conn> makeTcpConn(const ConnSetup& s);
// ucx: a UCP stream endpoint on a worker of its own (`shared`: the
// transport's context, made by the first connection that opens).
struct UcxShared;
std::unique_ptr<Conn> makeUcxConn(const ConnSetup& s, std::shared_ptr<UcxShared> shared);
// `rdma`: the host has an active RDMA port (topology/rdma.h), where the
// traffic class derived from DSCP applies (elsewhere UCX would warn that no
// interface used it, once per worker).
std::shared_ptr<UcxShared> makeUcxShared(bool rdma);
bool ucxAvailable();
// self: one private fifo, for a rank sending to itself inside a group.
std::unique_ptr<Conn> makeSelfConn(const Config& cfg);

// Private staging fifo pair, mapped on first use (tcp, ucx and self keep
// their bytes in these); pages are faulted in as the fifos use them.
class Staging {
 public:
  explicit Staging(const Config& cfg)
      : cap_(cfg.fifoBytes), granule_(cfg.fifoGranule), window_(cfg.fifoWindow) {}
  ~Staging();
  ternResult_t allocate();   // idempotent
  bool ready() const { return send_ != nullptr; }
  Fifo& send() { return sendFifo_; }
  Fifo& recv() { return recvFifo_; }
  void* sendMem() const { return send_; }
  void* recvMem() const { return recv_; }
  size_t footprint() const;

 private:
  size_t cap_, granule_, window_;
  void *send_ = nullptr, *recv_ = nullptr;
  Fifo sendFifo_, recvFifo_;
};

// Private memory for staging fifos, faulted in page by page as it is used
// (memory follows use, transport/fifo.h; first touch is slow on some hosts,
// so a fifo keeps the pages it has touched until the connection closes).
void* allocPages(size_t bytes);
void freePages(void* p, size_t bytes);

}  // namespace tern
