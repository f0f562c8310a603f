// UCX transport (UCP stream API, UCX 1.13).  One context per flow class and
// communicator, made by the class's first connection to open, with the
// class's UCX_IB_SL / UCX_IB_TRAFFIC_CLASS (FlowMark; TERN_UCX_IB_SL,
// TERN_UCX_IB_TRAFFIC_CLASS, docs/ENV.md): those are context settings in UCX,
// so a context per class is what lets an IB / RoCE fabric see the classes
// apart.  Each connection has a worker of its own on its class's context,
// made when the connection is first used, on the connection table's opener thread (a worker shared with
// connections already moving bytes could not be touched from there: its
// thread mode is serialized), and the worker addresses travel over the
// control channel's share for the level.  A connection keeps the same two fifos as
// tcp: committed bytes are posted with ucp_stream_send_nbx straight from the
// send fifo (released when UCX completes them), and a ucp_stream_recv_nbx is
// kept posted on the free part of the receive fifo.  UCX picks the wire
// (UCX_TLS: shared memory, tcp, RDMA verbs); its variables keep working.
// UCX's tcp transport has no DSCP setting at all, so marking over TCP is the
// tern tcp transport's (docs/NETWORK_PRIORITY.md); the IB settings cannot be exercised on a
// host without IB (the tests read them back from each context's config).
// A peer that dies raises the endpoint's error handler: the connection is
// marked gone, which fails only the steps that still need it.
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "transport/fifo.h"
#include "transport/transport.h"

namespace tern {

struct UcxShared {
  std::mutex mu;  // opener threads make each class's context once
  ucp_context_h context[TERN_PRIORITY_LEVELS] = {};  // per flow class
  std::string settings[TERN_PRIORITY_LEVELS];        // its config as UCX prints it
  bool rdma = false;  // the host has an active RDMA port (makeUcxShared)
  ~UcxShared() {
    for (ucp_context_h c : context)
      if (c) ucp_cleanup(c);
  }
};

namespace {

constexpr size_t kMaxSend = 1 << 20;   // bytes per posted send
constexpr size_t kMaxInFlight = 4;     // posted sends per connection

ternResult_t ucxError(const char* what, ucs_status_t st) {
  return setError(ternSystemError, std::string(what) + ": " + ucs_status_string(st));
}

// The settings a class's context is made with: the NIC nearest this rank's
// GPU (topology) unless UCX_NET_DEVICES says, and the class's IB service
// level and traffic class.  A traffic class derived from the DSCP table only
// where the host has RDMA: elsewhere no interface would use it.
std::vector<std::pair<const char*, std::string>> contextSettings(const Config& tc, const FlowMark& m,
                                                                 bool rdma) {
  std::vector<std::pair<const char*, std::string>> v;
  if (!tc.ucxNetDevices.empty()) v.emplace_back("NET_DEVICES", tc.ucxNetDevices);
  if (m.ibSl >= 0) v.emplace_back("IB_SL", std::to_string(m.ibSl));
  if (m.ibTrafficClass >= 0 && (rdma || !tc.ibTcList.empty()))
    v.emplace_back("IB_TRAFFIC_CLASS", std::to_string(m.ibTrafficClass));
  return v;
}

// What UCX will make the context from, as ucp_config_print writes it (the
// IB keys appear there as set: UCX applies them when an IB interface opens).
std::string printConfig(const ucp_config_t* cfg, int flowClass) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return "";
  std::string title = "tern flow class " + std::to_string(flowClass);
  ucp_config_print(cfg, f, title.c_str(),
                   static_cast<ucs_config_print_flags_t>(UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HEADER));
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

ternResult_t makeContext(const Config& tc, const FlowMark& m, UcxShared* s) {
  std::lock_guard<std::mutex> lk(s->mu);
  const int k = m.flowClass;
  if (s->context[k]) return ternSuccess;
  ucp_config_t* cfg;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) return ucxError("ucp_config_read", st);
  std::string said;
  for (const auto& kv : contextSettings(tc, m, s->rdma)) {
    if ((st = ucp_config_modify(cfg, kv.first, kv.second.c_str())) != UCS_OK) {
      ucp_config_release(cfg);
      return ucxError((std::string("ucp_config_modify(") + kv.first + ")").c_str(), st);
    }
    said += std::string(" UCX_") + kv.first + "=" + kv.second;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_STREAM;
  params.mt_workers_shared = 1;  // workers are made and driven on different threads
  st = ucp_init(&params, cfg, &s->context[k]);
  s->settings[k] = printConfig(cfg, k);
  ucp_config_release(cfg);
  if (st != UCS_OK) return ucxError("ucp_init", st);
  TERN_LOG(Info, "ucx context for flow class %d:%s", k, said.empty() ? " UCX's own settings" : said.c_str());
  return ternSuccess;
}

class UcxConn : public Conn {
 public:
  UcxConn(std::shared_ptr<UcxShared> shared, const Config& cfg) : shared_(std::move(shared)), st_(cfg) {}
  ~UcxConn() override {
    if (!worker_) return;  // never opened
    closeEndpoint();
    ucp_worker_destroy(worker_);
  }

  void closeEndpoint() {
    // Close gracefully (delivering what is in flight) for up to a second,
    // then by force; outstanding requests then complete and can be freed.
    if (recvReq_) ucp_request_cancel(worker_, recvReq_);
    if (ep_) {
      bool closed = false;
      for (uint32_t flags : {0u, static_cast<uint32_t>(UCP_EP_CLOSE_FLAG_FORCE)}) {
        if (closed) break;
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = flags;
        void* req = ucp_ep_close_nbx(ep_, &p);
        Deadline d = deadlineAfter(flags ? 1.0 : (gone ? 0.0 : 1.0));
        while (UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS &&
               Clock::now() < d)
          ucp_worker_progress(worker_);
        closed = !UCS_PTR_IS_PTR(req) || ucp_request_check_status(req) != UCS_INPROGRESS;
        if (UCS_PTR_IS_PTR(req)) ucp_request_free(req);
        if (!closed && flags) break;  // leave it to ucp_worker_destroy
      }
    }
    for (auto& snd : sends_)
      if (snd.req) ucp_request_free(snd.req);
    if (recvReq_) ucp_request_free(recvReq_);
    for (ucp_mem_h h : {sendMemh_, recvMemh_})
      if (h) ucp_mem_unmap(context_, h);
  }

  // Staging fifos on first use, mapped once for UCX.
  ternResult_t activate() override {
    if (st_.ready()) return ternSuccess;
    if (st_.allocate() != ternSuccess) return setSysError("cannot allocate ucx staging buffers");
    TERN_CHECK(mapStaging(st_.sendMem(), &sendMemh_));
    return mapStaging(st_.recvMem(), &recvMemh_);
  }

  // One endpoint per worker pair: UCP pairs the endpoints two workers create
  // to each other in creation order, which a worker per connection keeps
  // trivially right however the levels' openings interleave.
  ternResult_t open(const ConnSetup& s) override {
    TERN_CHECK(makeContext(*s.cfg, s.mark, shared_.get()));
    {
      std::lock_guard<std::mutex> lk(shared_->mu);
      context_ = shared_->context[s.mark.flowClass];
      settings_ = shared_->settings[s.mark.flowClass];
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one operation at a time, any thread
    ucs_status_t st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) return ucxError("ucp_worker_create", st);
    TERN_CHECK(connectTo(s));
    TERN_LOG(Trace, "ucx connection to rank %d at level %d (flow class %d)", s.peer, s.level,
             s.mark.flowClass);
    return ternSuccess;
  }

  ternResult_t connectTo(const ConnSetup& s) {
    ucp_address_t* addr;
    size_t len;
    ucs_status_t st = ucp_worker_get_address(worker_, &addr, &len);
    if (st != UCS_OK) return ucxError("ucp_worker_get_address", st);
    uint64_t mine = len, theirs = 0;
    ternResult_t r = s.ch->send(&mine, sizeof mine, s.deadline);
    if (r == ternSuccess) r = s.ch->send(addr, len, s.deadline);
    ucp_worker_release_address(worker_, addr);
    if (r == ternSuccess) r = s.ch->recv(&theirs, sizeof theirs, s.deadline);
    if (r == ternSuccess && (theirs == 0 || theirs > (1 << 20)))
      r = setError(ternRemoteError, "rank " + std::to_string(s.peer) + " sent a bad UCX address");
    std::vector<char> remote(theirs);
    if (r == ternSuccess) r = s.ch->recv(remote.data(), theirs, s.deadline);
    TERN_CHECK(r);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) { static_cast<UcxConn*>(arg)->gone = true; };
    ep.err_handler.arg = this;
    st = ucp_ep_create(worker_, &ep, &ep_);
    if (st != UCS_OK) {
      // UCX 1.13's shared-memory transports cannot report peer failures; a
      // dead peer is still seen through the idle mesh socket.
      TERN_LOG(Info, "ucx endpoint to rank %d without peer-failure handling (%s)", s.peer,
               ucs_status_string(st));
      ep.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
      st = ucp_ep_create(worker_, &ep, &ep_);
    }
    if (st != UCS_OK) return ucxError("ucp_ep_create", st);
    return ternSuccess;
  }

  const char* name() const override { return "ucx"; }
  std::string endpointSettings() const override { return settings_; }
  size_t sendSpace(char** p) override { return send_().writable(p); }
  void sendCommit(size_t n) override { send_().produce(n); }
  size_t recvAvail(const char** p) override { return recv_().readable(p); }
  void recvConsume(size_t n) override { recv_().consume(n); }
  uint64_t sendPos() const override { return st_.ready() ? cst().send().produced() : 0; }
  uint64_t recvPos() const override { return st_.ready() ? cst().recv().consumed() : 0; }
  bool flushed() const override { return !st_.ready() || (cst().send().empty() && sends_.empty()); }
  bool needsProgress() const override { return true; }
  // Nothing more arrives: our endpoint failed, or the peer had exited
  // before a progress pass that then found nothing to take.  What it sent
  // before exiting waits inside UCX (its queues, our shared-memory FIFO, the
  // kernel under ucx-tcp) until the worker is progressed, and the control
  // socket's close, which sets `gone`, can come first.  Over UCX's
  // shared-memory transports, which cannot report a peer's failure, the
  // stream has no end of its own to wait for.
  bool inputEnded() const override { return recvEnded_ || drainedAfterGone_; }

  ternResult_t progress(bool* moved) override {
    const bool wasGone = peerGone();  // read first: the peer's bytes were in UCX before
    *moved = ucp_worker_progress(worker_) > 0;
    TERN_CHECK(reapSends(moved));
    TERN_CHECK(postSends(moved));
    TERN_CHECK(pumpRecv(moved));
    if (wasGone && !*moved && recvRoom()) drainedAfterGone_ = true;
    return ternSuccess;
  }

 private:
  struct Send { void* req; size_t len; };

  ternResult_t mapStaging(void* mem, ucp_mem_h* h) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = mem;
    mp.length = st_.footprint();
    ucs_status_t st = ucp_mem_map(context_, &mp, h);
    return st == UCS_OK ? ternSuccess : ucxError("ucp_mem_map", st);
  }

  static ucp_request_param_t withMemh(ucp_mem_h h) {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
    prm.memh = h;
    return prm;
  }

  ternResult_t broken(const char* what, ucs_status_t st) {
    gone = true;
    return setError(ternRemoteError, "ucx connection to rank " + std::to_string(peer) + " " +
                                         what + ": " + ucs_status_string(st));
  }

  // Sends complete in order: release their bytes from the fifo.
  ternResult_t reapSends(bool* moved) {
    while (!sends_.empty()) {
      void* req = sends_.front().req;  // nullptr: it completed when posted
      ucs_status_t st = req ? ucp_request_check_status(req) : UCS_OK;
      if (st == UCS_INPROGRESS) break;
      if (req) ucp_request_free(req);
      if (st != UCS_OK) return broken("failed while sending", st);
      release(sends_.front().len);
      sends_.pop_front();
      *moved = true;
    }
    return ternSuccess;
  }

  void release(size_t n) {
    send_().consume(n);
    posted_ -= n;
    countSent(n);
  }

  // Posts committed bytes that are not yet in flight.
  ternResult_t postSends(bool* moved) {
    while (sends_.size() < kMaxInFlight) {
      const char* p;
      size_t avail = send_().readable(&p);  // from the oldest unreleased byte
      if (avail <= posted_) return ternSuccess;
      // Posted bytes are a prefix of the readable region unless it wrapped.
      const char* start = p + posted_;
      size_t n = std::min(avail - posted_, kMaxSend);
      ucp_request_param_t prm = withMemh(sendMemh_);
      void* req = ucp_stream_send_nbx(ep_, start, n, &prm);
      if (UCS_PTR_IS_ERR(req)) return broken("could not send", UCS_PTR_STATUS(req));
      *moved = true;
      posted_ += n;
      if (req == nullptr) {  // completed in place: release only if nothing older is pending
        if (sends_.empty()) release(n);
        else sends_.push_back({nullptr, n});
      } else {
        sends_.push_back({req, n});
      }
      if (start + n != p + avail) continue;
      return ternSuccess;  // the rest lies past the wrap: post it once this part is released
    }
    return ternSuccess;
  }

  ternResult_t pumpRecv(bool* moved) {
    for (;;) {
      if (recvReq_) {
        size_t len = 0;
        ucs_status_t st = ucp_stream_recv_request_test(recvReq_, &len);
        if (st == UCS_INPROGRESS) return ternSuccess;
        ucp_request_free(recvReq_);
        recvReq_ = nullptr;
        if (st != UCS_OK) {
          gone = recvEnded_ = true;  // like a closed socket: what arrived stays readable
          return ternSuccess;
        }
        recv_().produce(len);
        countRecv(len);
        *moved = true;
      }
      // Not `gone`: the control socket may report the peer's exit (its
      // connection table reads it at once) while what it sent before still
      // waits inside UCX; only our own endpoint's failure ends receiving.
      if (recvEnded_) return ternSuccess;
      char* p;
      size_t space = recv_().writable(&p);
      if (space == 0) return ternSuccess;
      size_t len = 0;
      ucp_request_param_t prm = withMemh(recvMemh_);
      void* req = ucp_stream_recv_nbx(ep_, p, space, &len, &prm);
      if (UCS_PTR_IS_ERR(req)) {
        gone = recvEnded_ = true;
        return ternSuccess;
      }
      if (req == nullptr) {
        if (len == 0) return ternSuccess;
        recv_().produce(len);
        countRecv(len);
        *moved = true;
        continue;
      }
      recvReq_ = req;
    }
  }

  // The last pumpRecv could take whatever UCX held: a receive is posted,
  // or the fifo has room (one posted with room returns at once when UCX
  // holds nothing).  Progress runs on activated connections only, as
  // pumpRecv assumes.
  bool recvRoom() {
    char* p;
    return recvReq_ != nullptr || recv_().writable(&p) > 0;
  }

  Fifo& send_() { return st_.send(); }
  Fifo& recv_() { return st_.recv(); }
  Staging& cst() const { return const_cast<Staging&>(st_); }

  std::shared_ptr<UcxShared> shared_;
  ucp_context_h context_ = nullptr;  // the class's (shared_ owns it)
  std::string settings_;             // its config as printed (endpointSettings)
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  Staging st_;
  ucp_mem_h sendMemh_ = nullptr, recvMemh_ = nullptr;  // the fifos, mapped once
  std::deque<Send> sends_;
  size_t posted_ = 0;  // bytes handed to UCX and not yet released
  void* recvReq_ = nullptr;
  bool recvEnded_ = false;  // our endpoint failed: nothing more arrives
  bool drainedAfterGone_ = false;  // inputEnded()
};

}  // namespace

bool ucxAvailable() { return true; }

std::shared_ptr<UcxShared> makeUcxShared(bool rdma) {
  auto s = std::make_shared<UcxShared>();
  s->rdma = rdma;
  return s;
}

std::unique_ptr<Conn> makeUcxConn(const ConnSetup& s, std::shared_ptr<UcxShared> shared) {
  return std::make_unique<UcxConn>(std::move(shared), *s.cfg);
}

}  // namespace tern
