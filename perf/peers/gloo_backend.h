// GlooBackend: the perf harness's Backend over Debian's libgloo (tcp
// transport; the collectives as torch's ProcessGroupGloo calls them; Gloo
// has no reduce-scatter call, so that row has no Gloo column), for
// side-by-side comparison with tern.  Ranks come from the launcher's variables (TERN_RANK/TERN_NRANKS under ternrun, or
// OMPI_COMM_WORLD_*); rendezvous is a FileStore in $GLOO_STORE_DIR; the
// device binds $GLOO_HOSTNAME (default 127.0.0.1).
#pragma once
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common.h"

namespace ternperf {
namespace gloo_detail {

inline int envInt(const char* a, const char* b) {
  const char* v = getenv(a);
  if (!v) v = getenv(b);
  return v ? atoi(v) : -1;
}

template <class T>
gloo::AllreduceOptions::Func reduceFn(ternRedOp_t op) {
  switch (op) {
    case ternSum: return [](void* c, const void* a, const void* b, size_t n) {
        gloo::sum<T>(c, a, b, n); };
    case ternProd: return [](void* c, const void* a, const void* b, size_t n) {
        gloo::product<T>(c, a, b, n); };
    case ternMax: return [](void* c, const void* a, const void* b, size_t n) {
        gloo::max<T>(c, a, b, n); };
    case ternMin: return [](void* c, const void* a, const void* b, size_t n) {
        gloo::min<T>(c, a, b, n); };
    default: return nullptr;
  }
}

}  // namespace gloo_detail

class GlooBackend : public Backend {
 public:
  GlooBackend() {
    rank_ = gloo_detail::envInt("TERN_RANK", "OMPI_COMM_WORLD_RANK");
    size_ = gloo_detail::envInt("TERN_NRANKS", "OMPI_COMM_WORLD_SIZE");
    const char* dir = getenv("GLOO_STORE_DIR");
    const char* host = getenv("GLOO_HOSTNAME");
    if (rank_ < 0 || size_ < 1 || !dir) {
      fprintf(stderr, "gloo perf: set TERN_RANK/TERN_NRANKS (ternrun) and GLOO_STORE_DIR\n");
      exit(2);
    }
    gloo::transport::tcp::attr attr(host ? host : "127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    ctx->setTimeout(std::chrono::seconds(120));
    ctx->connectFullMesh(store, dev);
    ctx_ = ctx;
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "gloo-tcp"; }
  bool allReduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    return byType(dt, [&](auto t) { return run<decltype(t)>(s, r, n, op); });
  }
  bool allToAll(const void* s, void* r, size_t n, ternDataType_t dt) override {
    return byType(dt, [&](auto t) { return exchange<decltype(t)>(s, r, n); });
  }
  // In place (sendbuff = recvbuff + rank * count): Gloo reads its own block
  // from the output when no input is set.
  bool allGather(const void* s, void* r, size_t n, ternDataType_t dt) override {
    return byType(dt, [&](auto t) {
      using T = decltype(t);
      gloo::AllgatherOptions opts(ctx_);
      if (s != static_cast<T*>(r) + rank_ * n) opts.setInput(in<T>(s), n);
      opts.setOutput(static_cast<T*>(r), n * size_);
      opts.setTag(tag_++);
      gloo::allgather(opts);
      return true;
    });
  }
  bool broadcast(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    return byType(dt, [&](auto t) {
      using T = decltype(t);
      gloo::BroadcastOptions opts(ctx_);
      if (rank_ == root && s != r) opts.setInput(in<T>(s), n);
      opts.setOutput(static_cast<T*>(r), n);
      opts.setRoot(root);
      opts.setTag(tag_++);
      gloo::broadcast(opts);
      return true;
    });
  }
  bool reduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op, int root) override {
    return byType(dt, [&](auto t) {
      using T = decltype(t);
      auto fn = gloo_detail::reduceFn<T>(op);
      if (!fn) return false;
      gloo::ReduceOptions opts(ctx_);
      if (s != r) opts.setInput(in<T>(s), n);
      opts.setOutput(static_cast<T*>(r), n);
      opts.setRoot(root);
      opts.setReduceFunction(fn);
      opts.setTag(tag_++);
      gloo::reduce(opts);
      return true;
    });
  }
  bool gather(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    return byType(dt, [&](auto t) {
      using T = decltype(t);
      gloo::GatherOptions opts(ctx_);
      opts.setInput(in<T>(s), n);
      if (rank_ == root) opts.setOutput(static_cast<T*>(r), n * size_);
      opts.setRoot(root);
      opts.setTag(tag_++);
      gloo::gather(opts);
      return true;
    });
  }
  bool scatter(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    return byType(dt, [&](auto t) {
      using T = decltype(t);
      gloo::ScatterOptions opts(ctx_);
      std::vector<T*> blocks;
      if (rank_ == root)
        for (int j = 0; j < size_; ++j) blocks.push_back(in<T>(s) + j * n);
      if (rank_ == root) opts.setInputs(blocks, n);
      opts.setOutput(static_cast<T*>(r), n);
      opts.setRoot(root);
      opts.setTag(tag_++);
      gloo::scatter(opts);
      return true;
    });
  }
  // Unbound buffers, as torch's ProcessGroupGloo sends and receives.
  bool sendRecv(const void* s, void* r, size_t n, ternDataType_t dt) override {
    return byType(dt, [&](auto t) {
      size_t bytes = n * sizeof(decltype(t));
      if (s == r) {  // in place: send a copy
        inPlace_.assign(static_cast<const char*>(s), static_cast<const char*>(s) + bytes);
        s = inPlace_.data();
      }
      auto out = ctx_->createUnboundBuffer(const_cast<void*>(s), bytes);
      auto into = ctx_->createUnboundBuffer(r, bytes);
      uint64_t slot = tag_++;
      into->recv((rank_ + size_ - 1) % size_, slot);
      out->send((rank_ + 1) % size_, slot);
      return out->waitSend() && into->waitRecv();
    });
  }
  bool barrier() override {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
    return true;
  }
  const char* lastError() const override {
    return lacking_[0] ? lacking_ : "datatype or op not supported by Gloo";
  }

 private:
  template <class T>
  static T* in(const void* p) { return const_cast<T*>(static_cast<const T*>(p)); }
  // Calls f with a value of the C++ type of dt (false for types Gloo lacks).
  template <class F>
  static bool byType(ternDataType_t dt, F&& f) {
    switch (dt) {
      case ternFloat32: return f(float{});
      case ternFloat64: return f(double{});
      case ternInt32: return f(int32_t{});
      case ternInt64: return f(int64_t{});
      case ternUint8: return f(uint8_t{});
      default: return false;
    }
  }
  template <class T>
  bool run(const void* s, void* r, size_t n, ternRedOp_t op) {
    auto fn = gloo_detail::reduceFn<T>(op);
    if (!fn) return false;
    gloo::AllreduceOptions opts(ctx_);
    if (s != r) opts.setInput(in<T>(s), n);
    opts.setOutput(static_cast<T*>(r), n);
    opts.setReduceFunction(fn);
    opts.setTag(tag_++);
    gloo::allreduce(opts);
    return true;
  }
  // Gloo's alltoall has no in-place form: in place goes through a copy.
  template <class T>
  bool exchange(const void* s, void* r, size_t n) {
    size_t total = n * size_;
    if (s == r) {
      inPlace_.assign(static_cast<const char*>(r), static_cast<const char*>(r) + total * sizeof(T));
      s = inPlace_.data();
    }
    gloo::AlltoallOptions opts(ctx_);
    opts.setInput(in<T>(s), total);
    opts.setOutput(static_cast<T*>(r), total);
    opts.setTag(tag_++);
    gloo::alltoall(opts);
    return true;
  }
  std::vector<char> inPlace_;
  int rank_ = 0, size_ = 1;
  uint32_t tag_ = 1;
  std::shared_ptr<gloo::Context> ctx_;
};

}  // namespace ternperf
