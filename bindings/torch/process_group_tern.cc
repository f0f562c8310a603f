// The c10d backend "tern": a ProcessGroup (torch 1.x) or Backend (torch 2.x)
// whose operations run tern collectives on CPU tensors.
//
// Every call checks its arguments at once (a c10::Error -> RuntimeError in
// Python), then queues the operation on the group's worker (work_queue.h)
// and returns a Work at once; the Work's future completes when tern's
// operation does.
#include <torch/python.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <pybind11/chrono.h>

#include <functional>
#include <memory>

#include "tern/tern.h"
#include "work_queue.h"

namespace tern_torch {

#if TORCH_VERSION_MAJOR >= 2
using Base = c10d::Backend;  // torch 2.x: a backend behind a ProcessGroup
#else
using Base = c10d::ProcessGroup;
#endif
using c10d::OpType;
using c10d::Work;

// Raised on the worker thread, carried to the Work's waiter.
struct TernFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(ternResult_t r, ternComm_t comm) {
  if (r != ternSuccess)
    throw TernFailure(std::string("tern: ") + ternGetErrorString(r) + ": " + ternGetLastError(comm));
}

ternDataType_t dtypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar: return ternInt8;
    case at::kByte: return ternUint8;
    case at::kInt: return ternInt32;
    case at::kLong: return ternInt64;
    case at::kHalf: return ternFloat16;
    case at::kFloat: return ternFloat32;
    case at::kDouble: return ternFloat64;
    case at::kBFloat16: return ternBfloat16;
    default: TORCH_CHECK(false, "tern: unsupported tensor dtype ", t.scalar_type());
  }
  return ternFloat32;
}

void checkTensor(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "tern: only CPU tensors are supported, got ", t.device());
  TORCH_CHECK(t.is_contiguous(), "tern: tensors must be contiguous");
  TORCH_CHECK(!t.is_sparse(), "tern: sparse tensors are not supported");
  dtypeOf(t);
}

void checkSingle(const Tensors& ts) {
  TORCH_CHECK(ts.size() == 1, "tern: expects one tensor per call, got ", ts.size());
  checkTensor(ts[0]);
}

void checkSameAs(const at::Tensor& ref, const Tensors& ts) {
  for (auto& t : ts) {
    checkTensor(t);
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "tern: tensors of one call must share a dtype");
  }
}

// Bitwise ops have no tern kernel: allgather, then fold locally (integers).
bool isBitwise(const c10d::ReduceOp& op) {
  return op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
}

ternRedOp_t redOpOf(const c10d::ReduceOp& op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return ternSum;
    case c10d::ReduceOp::AVG: return ternAvg;
    case c10d::ReduceOp::PRODUCT: return ternProd;
    case c10d::ReduceOp::MIN: return ternMin;
    case c10d::ReduceOp::MAX: return ternMax;
    default: TORCH_CHECK(false, "tern: ReduceOp ", static_cast<int>(op), " is not supported");
  }
  return ternSum;
}

class ProcessGroupTern : public Base {
 public:
  ProcessGroupTern(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)
      : Base(rank, size) {
    ternUniqueId id;
    if (rank == 0) {
      check(ternGetUniqueId(&id), nullptr);
      store->set("tern/unique_id", std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
    } else {
      auto v = store->get("tern/unique_id");
      TORCH_CHECK(v.size() == sizeof id.internal, "tern: bad unique id in the store");
      std::copy(v.begin(), v.end(), id.internal);
    }
    check(ternCommInitRank(&comm_, size, id, rank), nullptr);
    queue_->start([this](std::vector<Job>& jobs, bool p2p) { run(jobs, p2p); });
  }

  ~ProcessGroupTern() override {
    queue_->stop();  // runs what is queued first
    ternCommDestroy(comm_);
  }

  const std::string getBackendName() const override { return "tern"; }

  c10::intrusive_ptr<Work> allreduce(Tensors& ts, const c10d::AllreduceOptions& o) override {
    checkSingle(ts);
    at::Tensor t = ts[0];
    if (isBitwise(o.reduceOp)) return bitwiseAllreduce(t, o.reduceOp);
    ternRedOp_t op = redOpOf(o.reduceOp);
    return enqueue(OpType::ALLREDUCE, ts, [this, t, op] {
      check(ternAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), op, comm_, nullptr), comm_);
    });
  }

  c10::intrusive_ptr<Work> allreduce_coalesced(Tensors& ts,
                                               const c10d::AllreduceCoalescedOptions& o) override {
    TORCH_CHECK(!ts.empty(), "tern: allreduce_coalesced needs tensors");
    checkSameAs(ts[0], ts);
    ternRedOp_t op = redOpOf(o.reduceOp);
    return enqueue(OpType::ALLREDUCE_COALESCED, ts, [this, ts, op] {
      at::Tensor flat = at::cat(flatViews(ts));  // one call for all of them
      check(ternAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dtypeOf(flat), op, comm_, nullptr), comm_);
      scatterFlat(flat, ts);
    });
  }

  c10::intrusive_ptr<Work> broadcast(Tensors& ts, const c10d::BroadcastOptions& o) override {
    checkSingle(ts);
    checkRoot(o.rootRank);
    at::Tensor t = ts[0];
    int root = static_cast<int>(o.rootRank);
    return enqueue(OpType::BROADCAST, ts, [this, t, root] {
      check(ternBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), root, comm_, nullptr), comm_);
    });
  }

  c10::intrusive_ptr<Work> reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    checkSingle(ts);
    checkRoot(o.rootRank);
    at::Tensor t = ts[0];
    ternRedOp_t op = redOpOf(o.reduceOp);
    int root = static_cast<int>(o.rootRank);
    return enqueue(OpType::REDUCE, ts, [this, t, op, root] {
      // In place: ternReduce writes recvbuff on the root only, so non-roots
      // keep their input, as with gloo.
      check(ternReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), op, root, comm_, nullptr), comm_);
    });
  }

  c10::intrusive_ptr<Work> allgather(std::vector<Tensors>& outs, Tensors& ins,
                                     const c10d::AllgatherOptions&) override {
    checkSingle(ins);
    checkWorldList(ins[0], outs, "allgather outputs");
    at::Tensor in = ins[0];
    Tensors out = outs[0];
    return enqueue(OpType::ALLGATHER, out, [this, in, out] {
      at::Tensor flat = at::empty({static_cast<int64_t>(out.size()) * in.numel()}, in.options());
      check(ternAllGather(in.data_ptr(), flat.data_ptr(), in.numel(), dtypeOf(in), comm_, nullptr), comm_);
      scatterFlat(flat, out);
    });
  }

  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                           const c10d::AllgatherOptions&) override {
    checkTensor(in);
    checkSameAs(in, {out});
    TORCH_CHECK(out.numel() == in.numel() * getSize(), "tern: output must be world size x input");
    return enqueue(OpType::_ALLGATHER_BASE, {out}, [this, in, out] {
      check(ternAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dtypeOf(in), comm_, nullptr), comm_);
    });
  }

  c10::intrusive_ptr<Work> reduce_scatter(Tensors& outs, std::vector<Tensors>& ins,
                                          const c10d::ReduceScatterOptions& o) override {
    checkSingle(outs);
    checkWorldList(outs[0], ins, "reduce_scatter inputs");
    at::Tensor out = outs[0];
    Tensors in = ins[0];
    ternRedOp_t op = redOpOf(o.reduceOp);
    return enqueue(OpType::REDUCE_SCATTER, outs, [this, out, in, op] {
      at::Tensor flat = at::cat(flatViews(in));
      check(ternReduceScatter(flat.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out), op, comm_, nullptr), comm_);
    });
  }

  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                const c10d::ReduceScatterOptions& o) override {
    checkTensor(out);
    checkSameAs(out, {in});
    TORCH_CHECK(in.numel() == out.numel() * getSize(), "tern: input must be world size x output");
    ternRedOp_t op = redOpOf(o.reduceOp);
    return enqueue(OpType::_REDUCE_SCATTER_BASE, {out}, [this, out, in, op] {
      check(ternReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out), op, comm_, nullptr), comm_);
    });
  }

  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplits,
                                         std::vector<int64_t>& inSplits, const c10d::AllToAllOptions&) override {
    checkTensor(in);
    checkSameAs(in, {out});
    std::vector<int64_t> inOff = offsets(in, inSplits), outOff = offsets(out, outSplits);
    int me = getRank();
    TORCH_CHECK(inOff[me + 1] - inOff[me] == outOff[me + 1] - outOff[me],
                "tern: alltoall sends a different number of elements to itself than it expects");
    return enqueue(OpType::ALLTOALL_BASE, {out}, [this, in, out, inOff, outOff] {
      size_t esz = in.element_size();
      auto* src = static_cast<const char*>(in.data_ptr());
      auto* dst = static_cast<char*>(out.data_ptr());
      ternDataType_t dt = dtypeOf(in);
      check(ternGroupStart(), comm_);
      for (int p = 0; p < getSize(); ++p) {
        size_t sendN = inOff[p + 1] - inOff[p], recvN = outOff[p + 1] - outOff[p];
        if (p == getRank()) {
          memcpy(dst + outOff[p] * esz, src + inOff[p] * esz, sendN * esz);
          continue;
        }
        if (recvN) ternRecv(dst + outOff[p] * esz, recvN, dt, p, comm_, nullptr);
        if (sendN) ternSend(src + inOff[p] * esz, sendN, dt, p, comm_, nullptr);
      }
      check(ternGroupEnd(), comm_);
    });
  }

  c10::intrusive_ptr<Work> send(Tensors& ts, int dst, int /*tag*/) override {
    checkSingle(ts);
    checkRoot(dst);
    at::Tensor t = ts[0];
    return enqueue(OpType::SEND, ts, [this, t, dst] {
      check(ternSend(t.data_ptr(), t.numel(), dtypeOf(t), dst, comm_, nullptr), comm_);
    }, /*p2p=*/true);
  }

  c10::intrusive_ptr<Work> recv(Tensors& ts, int src, int /*tag*/) override {
    checkSingle(ts);
    checkRoot(src);
    at::Tensor t = ts[0];
    return enqueue(OpType::RECV, ts, [this, t, src] {
      check(ternRecv(t.data_ptr(), t.numel(), dtypeOf(t), src, comm_, nullptr), comm_);
    }, /*p2p=*/true);
  }

  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions&) override {
    return enqueue(OpType::BARRIER, {}, [this] { check(ternBarrier(comm_), comm_); });
  }

  // tern's ternary-compressed allreduce (for the DDP comm hook): `handle`
  // keys the error-feedback residual of this tensor.
  c10::intrusive_ptr<Work> allreduceTernary(at::Tensor t, uint64_t handle) {
    checkTensor(t);
    return enqueue(OpType::ALLREDUCE, {t}, [this, t, handle] {
      check(ternAllReduceTernaryEx(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), ternAvg,
                                   reinterpret_cast<const void*>(handle), comm_, nullptr), comm_);
    });
  }

  // Runs `fn` on the worker after everything queued before it.
  void runOnWorker(std::function<void()> fn) { enqueue(OpType::UNKNOWN, {}, std::move(fn))->wait(); }

  ternComm_t comm() const { return comm_; }

 private:
  void checkRoot(int64_t r) const {
    TORCH_CHECK(r >= 0 && r < getSize(), "tern: rank ", r, " is outside the group of ", getSize());
  }

  // `lists` is one list of world-size tensors, each like `ref` in dtype and size.
  void checkWorldList(const at::Tensor& ref, const std::vector<Tensors>& lists, const char* what) const {
    TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == getSize(), "tern: ", what,
                " must be one list of world-size tensors");
    checkSameAs(ref, lists[0]);
    for (auto& t : lists[0])
      TORCH_CHECK(t.numel() == ref.numel(), "tern: ", what, " must each have ", ref.numel(), " elements");
  }

  static Tensors flatViews(const Tensors& ts) {
    Tensors v;
    for (auto& t : ts) v.push_back(t.reshape({-1}));
    return v;
  }

  static void scatterFlat(const at::Tensor& flat, const Tensors& outs) {
    int64_t off = 0;
    for (auto& o : outs) {
      o.view({-1}).copy_(flat.narrow(0, off, o.numel()));
      off += o.numel();
    }
  }

  // Element offsets of each peer's slice (equal splits along dim 0 if none given).
  std::vector<int64_t> offsets(const at::Tensor& t, const std::vector<int64_t>& splits) const {
    int64_t rows = t.dim() ? t.size(0) : 1, rowElems = rows ? t.numel() / rows : 0;
    std::vector<int64_t> off(getSize() + 1, 0);
    TORCH_CHECK(splits.empty() || static_cast<int>(splits.size()) == getSize(),
                "tern: alltoall split sizes need one entry per rank");
    TORCH_CHECK(!splits.empty() || rows % getSize() == 0, "tern: alltoall dim 0 must divide by world size");
    for (int p = 0; p < getSize(); ++p)
      off[p + 1] = off[p] + (splits.empty() ? rows / getSize() : splits[p]) * rowElems;
    TORCH_CHECK(off.back() == t.numel(), "tern: alltoall split sizes do not add up to the tensor");
    return off;
  }

  c10::intrusive_ptr<Work> bitwiseAllreduce(at::Tensor t, const c10d::ReduceOp& op) {
    TORCH_CHECK(!at::isFloatingType(t.scalar_type()), "tern: bitwise ReduceOps need integer tensors");
    return enqueue(OpType::ALLREDUCE, {t}, [this, t, op] {
      at::Tensor all = at::empty({getSize(), t.numel()}, t.options());
      check(ternAllGather(t.data_ptr(), all.data_ptr(), t.numel(), dtypeOf(t), comm_, nullptr), comm_);
      at::Tensor acc = all[0].clone();
      for (int r = 1; r < getSize(); ++r) {
        if (op == c10d::ReduceOp::BAND) acc.bitwise_and_(all[r]);
        else if (op == c10d::ReduceOp::BOR) acc.bitwise_or_(all[r]);
        else acc.bitwise_xor_(all[r]);
      }
      t.view({-1}).copy_(acc);
    });
  }

  c10::intrusive_ptr<TernWork> enqueue(OpType type, Tensors outputs, std::function<void()> fn,
                                       bool p2p = false) {
    return queue_->push(getRank(), type, std::move(outputs), std::move(fn), p2p);
  }

  // On the worker: a point-to-point batch runs as one tern group.
  void run(std::vector<Job>& jobs, bool p2p) {
    std::exception_ptr e;
    bool grouped = false;
    try {
      if (p2p) {
        check(ternGroupStart(), comm_);
        grouped = true;
      }
      for (auto& j : jobs) j.fn();
      if (grouped) {
        grouped = false;
        check(ternGroupEnd(), comm_);
      }
    } catch (...) {
      e = std::current_exception();
      if (grouped) ternGroupEnd();  // leave no group open on this thread
    }
    for (auto& j : jobs) j.work->complete(e);
  }

  ternComm_t comm_ = nullptr;
  std::shared_ptr<WorkQueue> queue_ = std::make_shared<WorkQueue>();
};

c10::intrusive_ptr<ProcessGroupTern> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int size, std::chrono::milliseconds timeout) {
  pybind11::gil_scoped_release nogil;  // rendezvous waits on the other ranks
  // c10d's timeout becomes the communicator's TERN_TIMEOUT unless the user set
  // one; the variable is read while the communicator is made, then restored.
  bool own = !getenv("TERN_TIMEOUT");
  if (own) setenv("TERN_TIMEOUT", std::to_string(timeout.count() / 1000.0).c_str(), 1);
  try {
    auto pg = c10::make_intrusive<ProcessGroupTern>(store, rank, size);
    if (own) unsetenv("TERN_TIMEOUT");
    return pg;
  } catch (...) {
    if (own) unsetenv("TERN_TIMEOUT");
    throw;
  }
}

}  // namespace tern_torch

PYBIND11_MODULE(_c10d, m) {
  namespace py = pybind11;
  using tern_torch::ProcessGroupTern;
  py::module::import("torch.distributed");  // registers the base classes with pybind11
  py::class_<ProcessGroupTern, tern_torch::Base, c10::intrusive_ptr<ProcessGroupTern>>(m, "ProcessGroupTern")
      .def("allreduce_ternary", &ProcessGroupTern::allreduceTernary, py::arg("tensor"), py::arg("handle"),
           py::call_guard<py::gil_scoped_release>())
      .def("set_ternary_config",
           [](ProcessGroupTern& pg, uint64_t seed, int block, float clip, bool ef, size_t minBytes) {
             // On the worker, so it lands between the operations around it.
             pg.runOnWorker([&] {
               ternTernaryConfig_t c;
               tern_torch::check(ternCommGetTernaryConfig(pg.comm(), &c), pg.comm());
               c.seed = seed;
               c.blockSize = block;
               c.clip = clip;
               c.errorFeedback = ef;
               c.minBytes = minBytes;
               tern_torch::check(ternCommSetTernaryConfig(pg.comm(), &c), pg.comm());
             });
           }, py::arg("seed"), py::arg("block"), py::arg("clip"), py::arg("error_feedback"),
           py::arg("min_bytes"), py::call_guard<py::gil_scoped_release>())
      .def("release_tensor",
           [](ProcessGroupTern& pg, uint64_t handle) {
             pg.runOnWorker([&] {
               tern_torch::check(ternCommReleaseTensor(pg.comm(), reinterpret_cast<const void*>(handle)), pg.comm());
             });
           }, py::call_guard<py::gil_scoped_release>())
      .def("ternary_stats", [](ProcessGroupTern& pg) {
        ternTernaryStats_t s;
        tern_torch::check(ternCommGetTernaryStats(pg.comm(), &s), pg.comm());
        return py::dict(py::arg("calls") = s.calls, py::arg("fallbacks") = s.fallbacks,
                        py::arg("wire_bytes") = s.wireBytes, py::arg("dense_bytes") = s.denseBytes);
      });
  m.def("create", &tern_torch::create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
}
