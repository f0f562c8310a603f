// The c10d backend "tern": a ProcessGroup (torch 1.x) or Backend (torch 2.x)
// whose operations run tern collectives on CPU tensors.
//
// Every call checks its arguments at once (a c10::Error -> RuntimeError in
// Python), then issues the operation to tern's engine as one group with
// ternGroupEndAsync, on the calling thread and so at its priority level
// (ternSetPriority / tern.set_priority), and returns a Work wrapping the
// request (tern_work.h).  Local work that needs the transfer's result
// (unpacking, folding) runs when the request completes, not in the caller.
#include <torch/python.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <pybind11/chrono.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tern/tern.h"
#include "sparse.h"
#include "tern_work.h"

namespace tern_torch {

#if TORCH_VERSION_MAJOR >= 2
using Base = c10d::Backend;  // torch 2.x: a backend behind a ProcessGroup
#else
using Base = c10d::ProcessGroup;
#endif
using c10d::OpType;
using c10d::Work;

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
  ProcessGroupTern(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   const ternConfig_t& config, std::chrono::milliseconds timeout)
      : Base(rank, size), timeout_(timeout) {
    ternUniqueId id;
    if (rank == 0) {
      check(ternGetUniqueId(&id));
      store->set("tern/unique_id", std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
    } else {
      auto v = store->get("tern/unique_id");
      TORCH_CHECK(v.size() == sizeof id.internal, "tern: bad unique id in the store");
      std::copy(v.begin(), v.end(), id.internal);
    }
    check(ternCommInitRankConfig(&comm_, size, id, rank, &config));
  }

  ~ProcessGroupTern() override {
    // Outstanding works are settled first; their callbacks may need the GIL.
    if (PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      completer_.stop();
    } else {
      completer_.stop();
    }
    ternCommDestroy(comm_);
  }

  const std::string getBackendName() const override { return "tern"; }

  c10::intrusive_ptr<Work> allreduce(Tensors& ts, const c10d::AllreduceOptions& o) override {
    if (ts.size() == 1 && ts[0].is_sparse()) return sparseAllreduce(ts[0], o.reduceOp);
    checkSingle(ts);
    at::Tensor t = ts[0];
    if (isBitwise(o.reduceOp)) return bitwiseAllreduce(t, o.reduceOp);
    ternRedOp_t op = redOpOf(o.reduceOp);
    return issue(OpType::ALLREDUCE, ts, {}, [&] {
      return ternAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), op, comm_, nullptr);
    });
  }

  c10::intrusive_ptr<Work> allreduce_coalesced(Tensors& ts,
                                               const c10d::AllreduceCoalescedOptions& o) override {
    TORCH_CHECK(!ts.empty(), "tern: allreduce_coalesced needs tensors");
    checkSameAs(ts[0], ts);
    ternRedOp_t op = redOpOf(o.reduceOp);
    at::Tensor flat = at::cat(flatViews(ts));  // one call for all of them
    return issue(OpType::ALLREDUCE_COALESCED, ts, {flat}, [&] {
      return ternAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dtypeOf(flat), op, comm_, nullptr);
    }, [flat, ts] { scatterFlat(flat, ts); });
  }

  c10::intrusive_ptr<Work> broadcast(Tensors& ts, const c10d::BroadcastOptions& o) override {
    checkSingle(ts);
    checkRoot(o.rootRank);
    at::Tensor t = ts[0];
    int root = static_cast<int>(o.rootRank);
    return issue(OpType::BROADCAST, ts, {}, [&] {
      return ternBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), root, comm_, nullptr);
    });
  }

  c10::intrusive_ptr<Work> reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    checkSingle(ts);
    checkRoot(o.rootRank);
    at::Tensor t = ts[0];
    ternRedOp_t op = redOpOf(o.reduceOp);
    int root = static_cast<int>(o.rootRank);
    // In place: ternReduce writes recvbuff on the root only, so non-roots
    // keep their input, as with gloo.
    return issue(OpType::REDUCE, ts, {}, [&] {
      return ternReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), op, root, comm_, nullptr);
    });
  }

  c10::intrusive_ptr<Work> allgather(std::vector<Tensors>& outs, Tensors& ins,
                                     const c10d::AllgatherOptions&) override {
    checkSingle(ins);
    checkWorldList(ins[0], outs, "allgather outputs");
    at::Tensor in = ins[0];
    Tensors out = outs[0];
    at::Tensor flat = at::empty({static_cast<int64_t>(out.size()) * in.numel()}, in.options());
    return issue(OpType::ALLGATHER, out, {in, flat}, [&] {
      return ternAllGather(in.data_ptr(), flat.data_ptr(), in.numel(), dtypeOf(in), comm_, nullptr);
    }, [flat, out] { scatterFlat(flat, out); });
  }

  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                           const c10d::AllgatherOptions&) override {
    checkTensor(in);
    checkSameAs(in, {out});
    TORCH_CHECK(out.numel() == in.numel() * getSize(), "tern: output must be world size x input");
    return issue(OpType::_ALLGATHER_BASE, {out}, {in}, [&] {
      return ternAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dtypeOf(in), comm_, nullptr);
    });
  }

  c10::intrusive_ptr<Work> reduce_scatter(Tensors& outs, std::vector<Tensors>& ins,
                                          const c10d::ReduceScatterOptions& o) override {
    checkSingle(outs);
    checkWorldList(outs[0], ins, "reduce_scatter inputs");
    at::Tensor out = outs[0];
    ternRedOp_t op = redOpOf(o.reduceOp);
    at::Tensor flat = at::cat(flatViews(ins[0]));
    return issue(OpType::REDUCE_SCATTER, outs, {flat}, [&] {
      return ternReduceScatter(flat.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out), op, comm_, nullptr);
    });
  }

  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                const c10d::ReduceScatterOptions& o) override {
    checkTensor(out);
    checkSameAs(out, {in});
    TORCH_CHECK(in.numel() == out.numel() * getSize(), "tern: input must be world size x output");
    ternRedOp_t op = redOpOf(o.reduceOp);
    return issue(OpType::_REDUCE_SCATTER_BASE, {out}, {in}, [&] {
      return ternReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out), op, comm_, nullptr);
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
    auto* src = static_cast<char*>(in.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    size_t esz = in.element_size();
    std::vector<Block> sends, recvs;
    for (int p = 0; p < getSize(); ++p) {
      sends.push_back({src + inOff[p] * esz, static_cast<size_t>(inOff[p + 1] - inOff[p])});
      recvs.push_back({dst + outOff[p] * esz, static_cast<size_t>(outOff[p + 1] - outOff[p])});
    }
    return exchange(OpType::ALLTOALL_BASE, {out}, {in}, dtypeOf(in), esz, sends, recvs);
  }

  // gloo's way: every input flattened into one buffer, one allgather, unpacked.
  c10::intrusive_ptr<Work> allgather_coalesced(std::vector<Tensors>& outs, Tensors& ins,
                                               const c10d::AllgatherOptions&) override {
    TORCH_CHECK(!ins.empty(), "tern: allgather_coalesced needs input tensors");
    checkSameAs(ins[0], ins);
    TORCH_CHECK(static_cast<int>(outs.size()) == getSize(),
                "tern: allgather_coalesced needs one output list per rank");
    for (auto& list : outs) {
      TORCH_CHECK(list.size() == ins.size(), "tern: allgather_coalesced: each output list must have ",
                  ins.size(), " tensors, like the input list");
      checkSameAs(ins[0], list);
      for (size_t i = 0; i < ins.size(); ++i)
        TORCH_CHECK(list[i].numel() == ins[i].numel(),
                    "tern: allgather_coalesced: output tensor sizes must match the inputs'");
    }
    at::Tensor in = at::cat(flatViews(ins));
    at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
    Tensors all;
    for (auto& list : outs) all.insert(all.end(), list.begin(), list.end());
    return issue(OpType::ALLGATHER_COALESCED, all, {in, flat}, [&] {
      return ternAllGather(in.data_ptr(), flat.data_ptr(), in.numel(), dtypeOf(in), comm_, nullptr);
    }, [flat, all] { scatterFlat(flat, all); });
  }

  // Python passes output lists on the root only.
  c10::intrusive_ptr<Work> gather(std::vector<Tensors>& outs, Tensors& ins,
                                  const c10d::GatherOptions& o) override {
    checkSingle(ins);
    checkRoot(o.rootRank);
    at::Tensor in = ins[0];
    int root = static_cast<int>(o.rootRank);
    if (getRank() != root) {
      TORCH_CHECK(outs.empty() || (outs.size() == 1 && outs[0].empty()),
                  "tern: gather: only the root (rank ", root, ") passes output tensors");
      return issue(OpType::GATHER, {}, {in}, [&] {
        return ternGather(in.data_ptr(), nullptr, in.numel(), dtypeOf(in), root, comm_, nullptr);
      });
    }
    checkWorldList(in, outs, "gather outputs");
    Tensors out = outs[0];
    at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
    return issue(OpType::GATHER, out, {in, flat}, [&] {
      return ternGather(in.data_ptr(), flat.data_ptr(), in.numel(), dtypeOf(in), root, comm_, nullptr);
    }, [flat, out] { scatterFlat(flat, out); });
  }

  // Python passes input lists on the root only.
  c10::intrusive_ptr<Work> scatter(Tensors& outs, std::vector<Tensors>& ins,
                                   const c10d::ScatterOptions& o) override {
    checkSingle(outs);
    checkRoot(o.rootRank);
    at::Tensor out = outs[0];
    int root = static_cast<int>(o.rootRank);
    at::Tensor flat;  // the root's blocks, one after the other
    if (getRank() == root) {
      checkWorldList(out, ins, "scatter inputs");
      flat = at::cat(flatViews(ins[0]));
    } else {
      TORCH_CHECK(ins.empty() || (ins.size() == 1 && ins[0].empty()),
                  "tern: scatter: only the root (rank ", root, ") passes input tensors");
    }
    return issue(OpType::SCATTER, outs, flat.defined() ? Tensors{flat} : Tensors{}, [&] {
      return ternScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(),
                         dtypeOf(out), root, comm_, nullptr);
    });
  }

  // The list form: tensor p goes to rank p, sizes may differ per peer.
  c10::intrusive_ptr<Work> alltoall(Tensors& outs, Tensors& ins, const c10d::AllToAllOptions&) override {
    int n = getSize();
    TORCH_CHECK(static_cast<int>(outs.size()) == n && static_cast<int>(ins.size()) == n,
                "tern: alltoall needs one input and one output tensor per rank");
    TORCH_CHECK(!ins.empty(), "tern: alltoall needs tensors");
    checkSameAs(ins[0], ins);
    checkSameAs(ins[0], outs);
    std::vector<Block> sends, recvs;
    for (int p = 0; p < n; ++p) {
      sends.push_back({ins[p].data_ptr(), static_cast<size_t>(ins[p].numel())});
      recvs.push_back({outs[p].data_ptr(), static_cast<size_t>(outs[p].numel())});
    }
    Tensors keep(ins.begin(), ins.end());
    return exchange(OpType::ALLTOALL, outs, keep, dtypeOf(ins[0]), ins[0].element_size(), sends, recvs);
  }

  // Sends and receives progress concurrently in tern's engine: an isend and
  // an irecv issued as separate requests cannot block each other.
  c10::intrusive_ptr<Work> send(Tensors& ts, int dst, int /*tag*/) override { return sendTo(ts, dst); }
  c10::intrusive_ptr<Work> recv(Tensors& ts, int src, int /*tag*/) override { return recvFrom(ts, src); }

  c10::intrusive_ptr<TernWork> sendTo(Tensors& ts, int dst) {
    checkSingle(ts);
    checkRoot(dst);
    at::Tensor t = ts[0];
    auto w = issue(OpType::SEND, ts, {}, [&] {
      return ternSend(t.data_ptr(), t.numel(), dtypeOf(t), dst, comm_, nullptr);
    });
    return w;
  }

  // tern's ternRecvAnySource (an extension): the next message any peer sends to
  // this rank at this priority level; the engine names the sender, which the
  // Work reports once the receive has completed.
  c10::intrusive_ptr<Work> recvAnysource(Tensors& ts, int /*tag*/) override {
    checkSingle(ts);
    at::Tensor t = ts[0];
    auto source = std::make_shared<int>(-1);
    auto w = issue(OpType::RECVANYSOURCE, ts, {}, [&] {
      return ternRecvAnySource(t.data_ptr(), t.numel(), dtypeOf(t), source.get(), comm_, nullptr);
    });
    w->setSource(source);
    return w;
  }

  c10::intrusive_ptr<TernWork> recvFrom(Tensors& ts, int src) {
    checkSingle(ts);
    checkRoot(src);
    at::Tensor t = ts[0];
    auto w = issue(OpType::RECV, ts, {}, [&] {
      return ternRecv(t.data_ptr(), t.numel(), dtypeOf(t), src, comm_, nullptr);
    });
    w->setSource(std::make_shared<int>(src));
    return w;
  }

  // gloo's monitored barrier: every rank checks in with rank 0, which waits
  // for each at most the timeout and names the ranks that did not come; then
  // rank 0 lets the others go.  (torch 1.13's Python monitored_barrier serves
  // gloo groups only; this is reached through the C++/pybind method.)
  void monitoredBarrier(const c10d::BarrierOptions& o, bool waitAllRanks) override {
    auto timeout = o.timeout == c10d::kUnsetTimeout ? timeout_ : o.timeout;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    at::Tensor token = at::zeros({1}, at::kInt);
    Tensors one{token};
    if (getRank() != 0) {
      sendTo(one, 0);
      auto ack = recvFrom(one, 0);
      TORCH_CHECK(waitUntil(ack, deadline), "tern: Rank ", getRank(), " timed out in monitoredBarrier after ",
                  timeout.count(), " ms (rank 0 did not let it pass)");
      return;
    }
    std::vector<c10::intrusive_ptr<TernWork>> arrivals;
    std::vector<Tensors> tokens(getSize());
    for (int p = 1; p < getSize(); ++p) {
      tokens[p] = {at::zeros({1}, at::kInt)};
      arrivals.push_back(recvFrom(tokens[p], p));
    }
    std::vector<int> missing;
    for (int p = 1; p < getSize(); ++p) {
      if (waitUntil(arrivals[p - 1], deadline)) continue;
      missing.push_back(p);
      if (!waitAllRanks) break;
    }
    if (!missing.empty()) {
      std::string who;
      for (int p : missing) who += (who.empty() ? "" : ", ") + std::to_string(p);
      TORCH_CHECK(false, "tern: Rank", missing.size() > 1 ? "s " : " ", who,
                  " failed to pass monitoredBarrier in ", timeout.count(), " ms");
    }
    for (int p = 1; p < getSize(); ++p) sendTo(one, p)->wait();
  }

  // ternBarrier cannot be issued asynchronously (not in a group); a one-element
  // allreduce completes on no rank before every rank has issued it.
  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions&) override {
    at::Tensor one = at::zeros({1}, at::kInt);
    return issue(OpType::BARRIER, {}, {one}, [&] {
      return ternAllReduce(one.data_ptr(), one.data_ptr(), 1, ternInt32, ternSum, comm_, nullptr);
    });
  }

  // tern's ternary-compressed allreduce (for the DDP comm hook): `handle`
  // keys the error-feedback residual of this tensor.
  c10::intrusive_ptr<Work> allreduceTernary(at::Tensor t, uint64_t handle) {
    checkTensor(t);
    return issue(OpType::ALLREDUCE, {t}, {}, [&] {
      return ternAllReduceTernaryEx(t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), ternAvg,
                                    reinterpret_cast<const void*>(handle), comm_, nullptr);
    });
  }

  ternComm_t comm() const { return comm_; }

 private:
  struct Block {  // one peer's part of an exchange
    void* data;
    size_t count;
  };

  // Block p of `sends` goes to rank p, block p of `recvs` comes from it; this
  // rank's own block is copied now (the input is the caller's until the call
  // returns), the others travel as sends and receives of one group.
  c10::intrusive_ptr<Work> exchange(OpType type, Tensors outputs, Tensors keep, ternDataType_t dt, size_t esz,
                                    const std::vector<Block>& sends, const std::vector<Block>& recvs) {
    int me = getRank();
    TORCH_CHECK(sends[me].count == recvs[me].count,
                "tern: alltoall sends a different number of elements to itself than it expects");
    memcpy(recvs[me].data, sends[me].data, sends[me].count * esz);
    return issue(type, std::move(outputs), std::move(keep), [&] {
      ternResult_t r = ternSuccess;
      for (int p = 0; p < getSize() && r == ternSuccess; ++p) {
        if (p == me) continue;
        if (recvs[p].count) r = ternRecv(recvs[p].data, recvs[p].count, dt, p, comm_, nullptr);
        if (sends[p].count && r == ternSuccess) r = ternSend(sends[p].data, sends[p].count, dt, p, comm_, nullptr);
      }
      return r;
    });
  }

  // gloo's sparse allreduce: every rank's coalesced indices and values are
  // allgathered, padded to the largest count (which a first allgather tells;
  // the call waits for it), and summed locally; the sum replaces the input.
  c10::intrusive_ptr<Work> sparseAllreduce(at::Tensor t, const c10d::ReduceOp& op) {
    TORCH_CHECK(op == c10d::ReduceOp::SUM, "tern: sparse allreduce supports ReduceOp.SUM only");
    TORCH_CHECK(t.device().is_cpu(), "tern: only CPU tensors are supported, got ", t.device());
    at::Tensor in = t.coalesce();
    at::Tensor idx = in._indices().to(at::kLong).contiguous(), val = in._values().contiguous();
    ternDataType_t dt = dtypeOf(val);
    std::vector<int64_t> counts = everyRanks(in._nnz());
    int64_t most = *std::max_element(counts.begin(), counts.end());
    at::Tensor idxPad = padTo(idx, 1, most), valPad = padTo(val, 0, most);
    at::Tensor idxAll = at::empty({getSize(), idx.size(0), most}, idx.options());
    std::vector<int64_t> valAllShape = valPad.sizes().vec();
    valAllShape.insert(valAllShape.begin(), getSize());
    at::Tensor valAll = at::empty(valAllShape, val.options());
    auto sizes = t.sizes().vec();
    return issue(OpType::ALLREDUCE, {t}, {idxPad, valPad, idxAll, valAll}, [&] {
      ternResult_t r = ternAllGather(idxPad.data_ptr(), idxAll.data_ptr(), idxPad.numel(), ternInt64, comm_, nullptr);
      if (r != ternSuccess) return r;
      return ternAllGather(valPad.data_ptr(), valAll.data_ptr(), valPad.numel(), dt, comm_, nullptr);
    }, [t, idxAll, valAll, counts, sizes] { t.copy_(sumOfParts(idxAll, valAll, counts, sizes)); });
  }

  // Every rank's `v`, by rank (an allgather, waited for).
  std::vector<int64_t> everyRanks(int64_t v) {
    at::Tensor mine = at::full({1}, v, at::kLong), all = at::empty({getSize()}, at::kLong);
    Tensors in{mine};
    std::vector<Tensors> out(1, all.unbind(0));  // views: the allgather fills `all`
    allgather(out, in, {})->wait();
    return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + getSize());
  }

  // Polls `w` until the deadline; true if it completed (failures rethrown).
  static bool waitUntil(const c10::intrusive_ptr<Work>& w, std::chrono::steady_clock::time_point deadline) {
    while (!w->isCompleted()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    w->wait();
    return true;
  }

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

  // Bitwise ops have no tern kernel: allgather, then fold once it is done.
  c10::intrusive_ptr<Work> bitwiseAllreduce(at::Tensor t, const c10d::ReduceOp& op) {
    TORCH_CHECK(!at::isFloatingType(t.scalar_type()), "tern: bitwise ReduceOps need integer tensors");
    at::Tensor all = at::empty({getSize(), t.numel()}, t.options());
    int n = getSize();
    return issue(OpType::ALLREDUCE, {t}, {all}, [&] {
      return ternAllGather(t.data_ptr(), all.data_ptr(), t.numel(), dtypeOf(t), comm_, nullptr);
    }, [t, all, op, n] {
      at::Tensor acc = all[0].clone();
      for (int r = 1; r < n; ++r) {
        if (op == c10d::ReduceOp::BAND) acc.bitwise_and_(all[r]);
        else if (op == c10d::ReduceOp::BOR) acc.bitwise_or_(all[r]);
        else acc.bitwise_xor_(all[r]);
      }
      t.view({-1}).copy_(acc);
    });
  }

  // Issues the tern calls `calls` makes (returning the first failure) as one
  // group on this thread, so at its priority and in call order; the Work
  // completes when the group's request does, then runs `after`.  A call that
  // fails to issue (the communicator failed earlier) fails the Work; what the
  // group issued anyway is still waited for in the completion path.
  c10::intrusive_ptr<TernWork> issue(OpType type, Tensors outputs, Tensors keep,
                                 const std::function<ternResult_t()>& calls,
                                 std::function<void()> after = nullptr) {
    auto w = c10::make_intrusive<TernWork>(getRank(), type, std::move(outputs), std::move(keep),
                                           std::move(after));
    check(ternGroupStart());
    ternResult_t r = calls();
    std::exception_ptr issueError = r != ternSuccess ? failure(r) : nullptr;
    ternRequest_t request = nullptr;
    r = ternGroupEndAsync(&request);
    if (!issueError && r != ternSuccess) issueError = failure(r);
    w->start(request, issueError);
    if (request) completer_.add(w);
    return w;
  }

  ternComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;  // the process group's (c10d) timeout
  Completer completer_;
};

c10::intrusive_ptr<ProcessGroupTern> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int size, std::chrono::milliseconds timeout) {
  pybind11::gil_scoped_release nogil;  // rendezvous waits on the other ranks
  // c10d's timeout bounds every wait of the communicator (ternRequestWait
  // included), unless the user set TERN_TIMEOUT: c10d always passes one (30
  // minutes by default), so it cannot tell us whether the user chose it.
  ternConfig_t config = TERN_CONFIG_INITIALIZER;
  if (!getenv("TERN_TIMEOUT")) config.timeoutSeconds = timeout.count() / 1000.0;
  return c10::make_intrusive<ProcessGroupTern>(store, rank, size, config, timeout);
}

}  // namespace tern_torch

PYBIND11_MODULE(_c10d, m) {
  namespace py = pybind11;
  using tern_torch::ProcessGroupTern;
  using tern_torch::check;
  py::module::import("torch.distributed");  // registers the base classes with pybind11
  py::class_<ProcessGroupTern, tern_torch::Base, c10::intrusive_ptr<ProcessGroupTern>>(m, "ProcessGroupTern")
      .def("allreduce_ternary", &ProcessGroupTern::allreduceTernary, py::arg("tensor"), py::arg("handle"),
           py::call_guard<py::gil_scoped_release>())
      // Both apply to calls issued from now on; issued ones keep what they had.
      .def("set_ternary_config",
           [](ProcessGroupTern& pg, uint64_t seed, int block, float clip, bool ef, size_t minBytes) {
             ternTernaryConfig_t c;
             check(ternCommGetTernaryConfig(pg.comm(), &c));
             c.seed = seed;
             c.blockSize = block;
             c.clip = clip;
             c.errorFeedback = ef;
             c.minBytes = minBytes;
             check(ternCommSetTernaryConfig(pg.comm(), &c));
           }, py::arg("seed"), py::arg("block"), py::arg("clip"), py::arg("error_feedback"),
           py::arg("min_bytes"))
      .def("release_tensor",
           [](ProcessGroupTern& pg, uint64_t handle) {
             check(ternCommReleaseTensor(pg.comm(), reinterpret_cast<const void*>(handle)));
           })
      .def("ternary_stats", [](ProcessGroupTern& pg) {
        ternTernaryStats_t s;
        check(ternCommGetTernaryStats(pg.comm(), &s));
        return py::dict(py::arg("calls") = s.calls, py::arg("fallbacks") = s.fallbacks,
                        py::arg("wire_bytes") = s.wireBytes, py::arg("dense_bytes") = s.denseBytes);
      });
  m.def("create", &tern_torch::create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
}
