// GlooBackend: the perf harness's Backend over Debian's libgloo (tcp
// transport; allreduce as torch uses it, alltoall), for side-by-side
// comparison with tern.  Ranks come from the launcher's variables (TERN_RANK/TERN_NRANKS under ternrun, or
// OMPI_COMM_WORLD_*); rendezvous is a FileStore in $GLOO_STORE_DIR; the
// device binds $GLOO_HOSTNAME (default 127.0.0.1).
#pragma once
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
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
    switch (dt) {
      case ternFloat32: return run<float>(s, r, n, op);
      case ternFloat64: return run<double>(s, r, n, op);
      case ternInt32: return run<int32_t>(s, r, n, op);
      case ternInt64: return run<int64_t>(s, r, n, op);
      case ternUint8: return run<uint8_t>(s, r, n, op);
      default: return false;
    }
  }
  bool allToAll(const void* s, void* r, size_t n, ternDataType_t dt) override {
    switch (dt) {
      case ternFloat32: return exchange<float>(s, r, n);
      case ternFloat64: return exchange<double>(s, r, n);
      case ternInt32: return exchange<int32_t>(s, r, n);
      case ternInt64: return exchange<int64_t>(s, r, n);
      case ternUint8: return exchange<uint8_t>(s, r, n);
      default: return false;
    }
  }
  bool barrier() override {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
    return true;
  }
  const char* lastError() const override { return "datatype or op not supported by Gloo"; }

 private:
  template <class T>
  bool run(const void* s, void* r, size_t n, ternRedOp_t op) {
    auto fn = gloo_detail::reduceFn<T>(op);
    if (!fn) return false;
    gloo::AllreduceOptions opts(ctx_);
    if (s != r) opts.setInput(const_cast<T*>(static_cast<const T*>(s)), n);
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
    opts.setInput(const_cast<T*>(static_cast<const T*>(s)), total);
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
