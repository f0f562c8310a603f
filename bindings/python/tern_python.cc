// Python bindings of the C API (module tern._tern; the package tern wraps it).
// Buffers are anything with the buffer protocol (numpy arrays, bytearray,
// memoryview); the datatype comes from the buffer's format unless given
// (bfloat16 has no buffer format: pass a uint16 buffer and dtype="bfloat16").
// Every call that talks to peers releases the GIL while it waits.
#include <pybind11/pybind11.h>
#include <pybind11/eval.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <string>

#include "tern/tern.h"

namespace py = pybind11;

namespace {

// Raised for every failed call; carries the result code and the sentence.
PyObject* gError = nullptr;

[[noreturn]] void raise(ternResult_t r, const std::string& sentence) {
  std::string msg = std::string(ternGetErrorString(r)) + ": " + sentence;
  py::object err = py::reinterpret_borrow<py::object>(gError)(msg, static_cast<int>(r));
  PyErr_SetObject(gError, err.ptr());
  throw py::error_already_set();
}

// Misuse caught here, before any tern call: the same exception as tern's own.
[[noreturn]] void badArgument(const std::string& sentence) { raise(ternInvalidArgument, sentence); }

void check(ternResult_t r, ternComm_t comm = nullptr) {
  if (r != ternSuccess) raise(r, ternGetLastError(comm));
}

// ternMemAlloc's memory for as long as Python holds a view of it.
struct SharedBuffer {
  explicit SharedBuffer(size_t n) : bytes(n) { check(ternMemAlloc(&ptr, n)); }
  ~SharedBuffer() { ternMemFree(ptr); }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

// Runs a blocking call without the GIL; raises on failure.
template <class F>
void call(ternComm_t comm, F&& f) {
  ternResult_t r;
  {
    py::gil_scoped_release nogil;
    r = f();
  }
  check(r, comm);
}

const std::map<std::string, ternDataType_t>& dtypeNames() {
  static const std::map<std::string, ternDataType_t> m = {
      {"int8", ternInt8},       {"uint8", ternUint8},     {"int32", ternInt32},
      {"uint32", ternUint32},   {"int64", ternInt64},     {"uint64", ternUint64},
      {"float16", ternFloat16}, {"float32", ternFloat32}, {"float64", ternFloat64},
      {"bfloat16", ternBfloat16}};
  return m;
}

ternDataType_t dtypeOfFormat(const py::buffer_info& b) {
  std::string f = b.format;
  if (!f.empty() && strchr("@=<>!", f[0])) f.erase(0, 1);
  bool isSigned = f == "b" || f == "h" || f == "i" || f == "l" || f == "q";
  bool isUnsigned = f == "B" || f == "H" || f == "I" || f == "L" || f == "Q";
  if (f == "e") return ternFloat16;
  if (f == "f") return ternFloat32;
  if (f == "d") return ternFloat64;
  if (isSigned || isUnsigned) {
    switch (b.itemsize) {
      case 1: return isSigned ? ternInt8 : ternUint8;
      case 4: return isSigned ? ternInt32 : ternUint32;
      case 8: return isSigned ? ternInt64 : ternUint64;
      default: break;
    }
  }
  badArgument("tern cannot reduce buffers of format '" + b.format + "' (itemsize " +
                       std::to_string(b.itemsize) + "); pass dtype= for bfloat16 stored as uint16");
}

ternRedOp_t opOf(const std::string& op) {
  static const std::map<std::string, ternRedOp_t> m = {
      {"sum", ternSum}, {"prod", ternProd}, {"max", ternMax}, {"min", ternMin}, {"avg", ternAvg}};
  auto it = m.find(op);
  if (it == m.end()) badArgument("op must be one of sum, prod, max, min, avg; got '" + op + "'");
  return it->second;
}

// A contiguous view of a Python buffer with its tern datatype and count.
struct Buf {
  py::buffer_info info;
  ternDataType_t dtype;
  size_t count;
  void* ptr() const { return info.ptr; }
};

Buf view(const py::buffer& obj, bool writable, const std::string& dtype, const char* what) {
  Buf b{obj.request(writable), ternFloat32, 0};
  ssize_t expect = b.info.itemsize;
  for (ssize_t d = b.info.ndim - 1; d >= 0; --d) {
    if (b.info.shape[d] > 1 && b.info.strides[d] != expect)
      badArgument(std::string(what) + " must be C-contiguous");
    expect *= b.info.shape[d];
  }
  if (dtype.empty()) {
    b.dtype = dtypeOfFormat(b.info);
  } else {
    auto it = dtypeNames().find(dtype);
    if (it == dtypeNames().end()) badArgument("unknown dtype '" + dtype + "'");
    b.dtype = it->second;
  }
  size_t bytes = static_cast<size_t>(b.info.size) * b.info.itemsize;
  if (bytes % ternTypeSize(b.dtype))
    badArgument(std::string(what) + " is not a whole number of " + dtype + " elements");
  b.count = bytes / ternTypeSize(b.dtype);
  return b;
}

// recv defaults to send (in place); otherwise it must hold `need` elements of
// the same type.
Buf outView(const py::buffer& send, const py::object& recv, const Buf& in, size_t need,
            const std::string& dtype) {
  Buf out = view(recv.is_none() ? send : recv.cast<py::buffer>(), true, dtype, "recv");
  if (out.dtype != in.dtype) badArgument("send and recv have different datatypes");
  if (out.count != need)
    badArgument("recv holds " + std::to_string(out.count) + " elements; the call needs " +
                          std::to_string(need));
  return out;
}

class Comm {
 public:
  explicit Comm(ternComm_t c) : c_(c) {}
  ~Comm() {
    if (c_) ternCommDestroy(c_);
  }
  ternComm_t get() const {
    if (!c_) badArgument("the communicator was destroyed");
    return c_;
  }
  void destroy() {
    ternComm_t c = get();
    c_ = nullptr;
    call(nullptr, [&] { return ternCommDestroy(c); });
  }
  void abort() {
    ternComm_t c = get();
    c_ = nullptr;
    check(ternCommAbort(c));
  }
  int rank() const {
    int r;
    check(ternCommUserRank(get(), &r), get());
    return r;
  }
  int size() const {
    int n;
    check(ternCommCount(get(), &n), get());
    return n;
  }

 private:
  ternComm_t c_;
};

py::bytes uniqueId() {
  ternUniqueId id;
  check(ternGetUniqueId(&id));
  return py::bytes(id.internal, sizeof id.internal);
}

ternUniqueId idOf(const py::bytes& b) {
  std::string s = b;
  if (s.size() != TERN_UNIQUE_ID_BYTES)
    badArgument("a unique id is " + std::to_string(TERN_UNIQUE_ID_BYTES) + " bytes");
  ternUniqueId id;
  memcpy(id.internal, s.data(), sizeof id.internal);
  return id;
}

// The keyword options of Comm(...) / Comm.from_env(...) as a ternConfig_t;
// None leaves a field unset (environment or default).  Checked by tern.
ternConfig_t configOf(const py::object& timeout, const py::object& flowClasses,
                      const py::object& dscp, const py::object& ternary) {
  ternConfig_t c = TERN_CONFIG_INITIALIZER;
  if (!timeout.is_none()) {
    c.timeoutSeconds = timeout.cast<double>();
    // Checked here too: -1 is the struct's "unset", which tern cannot refuse.
    if (!(c.timeoutSeconds > 0))
      badArgument("timeout= must be > 0 seconds, not " + py::str(timeout).cast<std::string>());
  }
  if (!flowClasses.is_none()) c.flowClasses = flowClasses.cast<int>();
  if (!dscp.is_none()) {
    auto v = dscp.cast<std::vector<int>>();
    if (v.size() > TERN_PRIORITY_LEVELS)
      badArgument("dscp= has " + std::to_string(v.size()) + " entries; at most one per flow class (" +
                  std::to_string(TERN_PRIORITY_LEVELS) + ")");
    std::copy(v.begin(), v.end(), c.trafficClass);
  }
  if (!ternary.is_none()) {
    // All five, as ternary_config() returns them: a partial set would leave
    // the others at values that are neither the environment's nor tern's.
    auto d = ternary.cast<py::dict>();
    static const char* const keys[] = {"seed", "block", "clip", "error_feedback", "min_bytes"};
    for (auto& kv : d)
      if (std::find_if(std::begin(keys), std::end(keys), [&](const char* k) {
            return kv.first.cast<std::string>() == k;
          }) == std::end(keys))
        badArgument("ternary= has no option '" + kv.first.cast<std::string>() +
                    "' (seed, block, clip, error_feedback, min_bytes)");
    for (const char* k : keys)
      if (!d.contains(k))
        badArgument(std::string("ternary= needs all of seed, block, clip, error_feedback, "
                                "min_bytes; '") + k + "' is missing (comm.ternary_config() has them all)");
    c.ternarySet = 1;
    c.ternary.seed = d["seed"].cast<unsigned long long>();
    c.ternary.blockSize = d["block"].cast<int>();
    c.ternary.clip = d["clip"].cast<float>();
    c.ternary.errorFeedback = d["error_feedback"].cast<bool>();
    c.ternary.minBytes = d["min_bytes"].cast<size_t>();
  }
  return c;
}

void bindCollectives(py::class_<Comm>& c) {
  using A = py::arg;
  c.def("allreduce", [](Comm& self, py::buffer send, py::object recv, const std::string& op,
                        const std::string& dtype) {
        Buf in = view(send, false, dtype, "send");
        Buf out = outView(send, recv, in, in.count, dtype);
        ternRedOp_t o = opOf(op);
        call(self.get(), [&] { return ternAllReduce(in.ptr(), out.ptr(), in.count, in.dtype, o, self.get(), nullptr); });
      }, A("send"), A("recv") = py::none(), A("op") = "sum", A("dtype") = "");
  c.def("allreduce_ternary", [](Comm& self, py::buffer send, py::object recv, const std::string& op,
                                py::object handle, const std::string& dtype) {
        Buf in = view(send, false, dtype, "send");
        Buf out = outView(send, recv, in, in.count, dtype);
        ternRedOp_t o = opOf(op);
        // The handle keys the error-feedback residual; default: the buffer.
        const void* h = handle.is_none() ? in.ptr() : reinterpret_cast<const void*>(handle.cast<uintptr_t>());
        call(self.get(), [&] {
          return ternAllReduceTernaryEx(in.ptr(), out.ptr(), in.count, in.dtype, o, h, self.get(), nullptr);
        });
      }, A("send"), A("recv") = py::none(), A("op") = "avg", A("handle") = py::none(), A("dtype") = "");
  c.def("broadcast", [](Comm& self, py::buffer buf, int root, const std::string& dtype) {
        Buf b = view(buf, true, dtype, "buffer");
        call(self.get(), [&] { return ternBroadcast(b.ptr(), b.ptr(), b.count, b.dtype, root, self.get(), nullptr); });
      }, A("buffer"), A("root") = 0, A("dtype") = "");
  c.def("reduce", [](Comm& self, py::buffer send, py::object recv, int root, const std::string& op,
                     const std::string& dtype) {
        Buf in = view(send, false, dtype, "send");
        Buf out = outView(send, recv, in, in.count, dtype);
        ternRedOp_t o = opOf(op);
        call(self.get(), [&] { return ternReduce(in.ptr(), out.ptr(), in.count, in.dtype, o, root, self.get(), nullptr); });
      }, A("send"), A("recv") = py::none(), A("root") = 0, A("op") = "sum", A("dtype") = "");
  c.def("allgather", [](Comm& self, py::buffer send, py::buffer recv, const std::string& dtype) {
        Buf in = view(send, false, dtype, "send");
        Buf out = outView(send, recv, in, in.count * self.size(), dtype);
        call(self.get(), [&] { return ternAllGather(in.ptr(), out.ptr(), in.count, in.dtype, self.get(), nullptr); });
      }, A("send"), A("recv"), A("dtype") = "");
  c.def("reduce_scatter", [](Comm& self, py::buffer send, py::buffer recv, const std::string& op,
                             const std::string& dtype) {
        Buf out = view(recv, true, dtype, "recv");
        Buf in = view(send, false, dtype, "send");
        if (in.dtype != out.dtype) badArgument("send and recv have different datatypes");
        if (in.count != out.count * self.size())
          badArgument("send must hold size() x len(recv) elements");
        ternRedOp_t o = opOf(op);
        call(self.get(), [&] { return ternReduceScatter(in.ptr(), out.ptr(), out.count, in.dtype, o, self.get(), nullptr); });
      }, A("send"), A("recv"), A("op") = "sum", A("dtype") = "");
  c.def("send", [](Comm& self, py::buffer buf, int peer, const std::string& dtype) {
        Buf b = view(buf, false, dtype, "buffer");
        call(self.get(), [&] { return ternSend(b.ptr(), b.count, b.dtype, peer, self.get(), nullptr); });
      }, A("buffer"), A("peer"), A("dtype") = "");
  c.def("recv", [](Comm& self, py::buffer buf, int peer, const std::string& dtype) {
        Buf b = view(buf, true, dtype, "buffer");
        call(self.get(), [&] { return ternRecv(b.ptr(), b.count, b.dtype, peer, self.get(), nullptr); });
      }, A("buffer"), A("peer"), A("dtype") = "");
  c.def("barrier", [](Comm& self) { call(self.get(), [&] { return ternBarrier(self.get()); }); });
}

void bindTernaryOptions(py::class_<Comm>& c) {
  c.def("ternary_config", [](Comm& self) {
    ternTernaryConfig_t t;
    check(ternCommGetTernaryConfig(self.get(), &t), self.get());
    py::dict d;
    d["seed"] = t.seed;
    d["block"] = t.blockSize;
    d["clip"] = t.clip;
    d["error_feedback"] = static_cast<bool>(t.errorFeedback);
    d["min_bytes"] = t.minBytes;
    return d;
  });
  c.def("set_ternary_config", [](Comm& self, py::object seed, py::object block, py::object clip,
                                 py::object errorFeedback, py::object minBytes) {
        ternTernaryConfig_t t;
        check(ternCommGetTernaryConfig(self.get(), &t), self.get());
        if (!seed.is_none()) t.seed = seed.cast<unsigned long long>();
        if (!block.is_none()) t.blockSize = block.cast<int>();
        if (!clip.is_none()) t.clip = clip.cast<float>();
        if (!errorFeedback.is_none()) t.errorFeedback = errorFeedback.cast<bool>();
        if (!minBytes.is_none()) t.minBytes = minBytes.cast<size_t>();
        check(ternCommSetTernaryConfig(self.get(), &t), self.get());
      }, py::arg("seed") = py::none(), py::arg("block") = py::none(), py::arg("clip") = py::none(),
      py::arg("error_feedback") = py::none(), py::arg("min_bytes") = py::none());
  c.def("release_tensor", [](Comm& self, uintptr_t handle) {
    check(ternCommReleaseTensor(self.get(), reinterpret_cast<const void*>(handle)), self.get());
  });
  // ternCommGetFlowStats: bytes per network flow class (a level's class is
  // flowClassOf(level); with flow_classes=8 every level is a class of its own).
  c.def("flow_stats", [](Comm& self) {
    ternFlowStats_t s{};
    s.size = sizeof s;
    check(ternCommGetFlowStats(self.get(), &s), self.get());
    py::dict d;
    d["flow_classes"] = s.flowClasses;
    d["dscp"] = std::vector<int>(s.dscp, s.dscp + s.flowClasses);
    d["bytes_sent"] = std::vector<unsigned long long>(s.bytesSent, s.bytesSent + s.flowClasses);
    d["bytes_recv"] = std::vector<unsigned long long>(s.bytesRecv, s.bytesRecv + s.flowClasses);
    return d;
  });
  c.def("ternary_stats", [](Comm& self) {
    ternTernaryStats_t s;
    check(ternCommGetTernaryStats(self.get(), &s), self.get());
    py::dict d;
    d["calls"] = s.calls;
    d["fallbacks"] = s.fallbacks;
    d["elements"] = s.elements;
    d["payload_bytes"] = s.payloadBytes;
    d["wire_bytes"] = s.wireBytes;
    d["dense_bytes"] = s.denseBytes;
    return d;
  });
}
// A weight stream (ternWeightStream*): the arrays of every call must match
// the tensors the stream was opened with (count and datatype each), which
// is checked here: the C API trusts its pointers.
class WeightStream {
 public:
  WeightStream(py::object comm, ternWeightStream_t ws, std::vector<size_t> counts,
               std::vector<ternDataType_t> types)
      : comm_(std::move(comm)), ws_(ws), counts_(std::move(counts)), types_(std::move(types)) {}
  ~WeightStream() {
    if (!ws_) return;
    py::gil_scoped_release nogil;
    ternWeightStreamClose(ws_);  // garbage collected: what it returns has nobody to go to
  }
  void push(const py::sequence& arrays, long long version) {
    std::vector<Buf> bufs = views(arrays, false);
    std::vector<const void*> ptrs;
    for (const Buf& b : bufs) ptrs.push_back(b.ptr());
    call(nullptr, [&] { return ternWeightStreamPush(get(), ptrs.data(), version); });
  }
  py::object poll(const py::sequence& arrays) {
    std::vector<Buf> bufs = views(arrays, true);
    std::vector<void*> ptrs = pointers(bufs);
    long long v = version_;
    call(nullptr, [&] { return ternWeightStreamPoll(get(), ptrs.data(), &v); });
    if (v == version_) return py::none();
    version_ = v;
    return py::int_(v);
  }
  long long wait(const py::sequence& arrays, long long minVersion) {
    std::vector<Buf> bufs = views(arrays, true);
    std::vector<void*> ptrs = pointers(bufs);
    long long v = version_;
    call(nullptr, [&] { return ternWeightStreamWait(get(), ptrs.data(), minVersion, &v); });
    return version_ = v;
  }
  void close() {
    ternWeightStream_t ws = get();
    ws_ = nullptr;
    call(nullptr, [&] { return ternWeightStreamClose(ws); });
  }
  long long version() const { return version_; }

 private:
  ternWeightStream_t get() const {
    if (!ws_) badArgument("the weight stream was closed");
    return ws_;
  }
  std::vector<Buf> views(const py::sequence& arrays, bool writable) const {
    if (arrays.size() != counts_.size())
      badArgument("the stream carries " + std::to_string(counts_.size()) + " tensors; got " +
                  std::to_string(arrays.size()) + " arrays");
    std::vector<Buf> bufs;
    for (size_t i = 0; i < counts_.size(); ++i) {
      std::string what = "array " + std::to_string(i);
      bufs.push_back(view(arrays[i].cast<py::buffer>(), writable, "", what.c_str()));
      if (bufs.back().count != counts_[i] || bufs.back().dtype != types_[i])
        badArgument(what + " does not match the tensor the stream was opened with (" +
                    std::to_string(counts_[i]) + " elements of tern type " +
                    std::to_string(types_[i]) + ")");
    }
    return bufs;
  }
  static std::vector<void*> pointers(const std::vector<Buf>& bufs) {
    std::vector<void*> p;
    for (const Buf& b : bufs) p.push_back(b.ptr());
    return p;
  }
  py::object comm_;  // keeps the Comm object alive while the stream is open
  ternWeightStream_t ws_;
  std::vector<size_t> counts_;
  std::vector<ternDataType_t> types_;
  long long version_ = -1;  // the last version copied out (receiver)
};

// comm.weight_stream(peer, sender, tensors, priority): `tensors` lists
// arrays (their sizes and types) or (count, "dtype") pairs.
WeightStream* openWeightStream(py::object self, int peer, int sender, const py::sequence& tensors,
                               int priority) {
  std::vector<size_t> counts;
  std::vector<ternDataType_t> types;
  for (const py::handle& t : tensors) {
    if (py::isinstance<py::tuple>(t)) {
      auto pair = t.cast<std::pair<size_t, std::string>>();
      auto it = dtypeNames().find(pair.second);
      if (it == dtypeNames().end()) badArgument("unknown dtype '" + pair.second + "'");
      counts.push_back(pair.first);
      types.push_back(it->second);
    } else {
      Buf b = view(t.cast<py::buffer>(), false, "", "tensor");
      counts.push_back(b.count);
      types.push_back(b.dtype);
    }
  }
  ternComm_t comm = self.cast<Comm&>().get();
  ternWeightStream_t ws;
  call(comm, [&] {
    return ternWeightStreamOpen(comm, peer, sender, static_cast<int>(counts.size()), counts.data(),
                                types.data(), priority, &ws);
  });
  return new WeightStream(self, ws, counts, types);
}

void bindWeightStreams(py::module& m, py::class_<Comm>& c) {
  py::class_<WeightStream> w(m, "WeightStream",
                             "A one-way stream of versions of a set of arrays (comm.weight_stream)");
  w.def("push", &WeightStream::push, py::arg("arrays"), py::arg("version"),
        "Sender: snapshot the arrays as `version` (increasing, >= 0) and return at once");
  w.def("poll", &WeightStream::poll, py::arg("arrays"),
        "Receiver: copy the newest complete version into the arrays if it is newer than the "
        "last one copied, and return it; else None (never blocks)");
  w.def("wait", &WeightStream::wait, py::arg("arrays"), py::arg("min_version"),
        "Receiver: block (at most the comm's timeout) until version >= min_version arrived, "
        "copy the newest in, return its version");
  w.def("close", &WeightStream::close,
        "Both ends: versions pushed before it are delivered (or superseded) first");
  w.def_property_readonly("version", &WeightStream::version, "The last version copied out (-1: none)");
  w.def("__enter__", [](py::object self) { return self; });
  w.def("__exit__", [](WeightStream& self, py::args) {
    try {
      self.close();
    } catch (py::error_already_set&) {  // closed already, or the error the body raised matters more
    }
  });
  c.def("weight_stream", &openWeightStream, py::arg("peer"), py::arg("sender"), py::arg("tensors"),
        py::arg("priority") = 7, py::return_value_policy::take_ownership,
        "Open a weight stream with `peer` (both call it with the same arguments); `sender` is "
        "this rank or the peer; `tensors` lists arrays or (count, dtype) pairs");
}

}  // namespace

PYBIND11_MODULE(_tern, m) {
  m.doc() = "tern collective communication (C API bindings; use the tern package)";
  py::object runtimeError = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  py::dict ns;
  ns["RuntimeError"] = runtimeError;
  // A RuntimeError subclass, so torch-style `except RuntimeError` catches it.
  py::exec(R"(
class Error(RuntimeError):
    """A failed tern call: str() is the sentence from ternGetLastError, .code the ternResult_t."""
    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code
)", ns);
  py::object err = ns["Error"];
  err.attr("__module__") = "tern";
  m.attr("Error") = err;
  gError = err.ptr();
  Py_INCREF(gError);

  m.def("unique_id", &uniqueId, "A fresh unique id (bytes): make it on one rank, share it, then Comm(id, size, rank)");
  m.def("version", [] {
    int v;
    check(ternGetVersion(&v));
    return v;
  });
  m.def("set_priority", [](int level) { check(ternSetPriority(level)); }, py::arg("level"),
        "Priority level (0 = most urgent ... 7 = bulk) of this thread's subsequent tern calls, "
        "on every communicator, the c10d backend's included; ranks match calls per level");
  m.def("get_priority", [] {
    int level;
    check(ternGetPriority(&level));
    return level;
  }, "This thread's priority level (default 4)");
  m.attr("PRIORITY_LEVELS") = TERN_PRIORITY_LEVELS;
  m.attr("PRIORITY_DEFAULT") = TERN_PRIORITY_DEFAULT;
  m.def("group_start", [] { check(ternGroupStart()); });
  m.def("group_end", [] { call(nullptr, [] { return ternGroupEnd(); }); });

  // Host memory from ternMemAlloc, as a buffer (np.frombuffer(b, np.float32),
  // torch.frombuffer): a send/recv, all-to-all, gather or scatter, or a
  // 2-rank broadcast, of at least 128 KiB, or a 2-rank allgather's block of
  // at least 256 KiB, out of it to a rank on this host is one copy instead
  // of two (a 2-rank reduce's root, and each rank of a 2-rank
  // reduce-scatter, reduce out of it).  Freed with the last view of it.
  py::class_<SharedBuffer>(
      m, "SharedBuffer", py::buffer_protocol(),
      "SharedBuffer(nbytes): zeroed host memory peers on this host can map (ternMemAlloc)")
      .def(py::init<size_t>(), py::arg("nbytes"))
      .def("__len__", [](const SharedBuffer& b) { return b.bytes; })
      .def_buffer([](SharedBuffer& b) {
        return py::buffer_info(b.ptr, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes)}, {static_cast<py::ssize_t>(1)});
      });

  py::class_<Comm> c(m, "Comm");
  // Options (keyword only): timeout (seconds, as TERN_TIMEOUT), flow_classes,
  // dscp (one per flow class), ternary (a dict like ternary_config()'s).
  py::arg_v timeout("timeout", py::none()), flowClasses("flow_classes", py::none()),
      dscp("dscp", py::none()), ternary("ternary", py::none());
  c.def(py::init([](py::bytes id, int size, int rank, py::object timeout, py::object flowClasses,
                    py::object dscp, py::object ternary) {
          ternUniqueId u = idOf(id);
          ternConfig_t cfg = configOf(timeout, flowClasses, dscp, ternary);
          ternComm_t comm;
          call(nullptr, [&] { return ternCommInitRankConfig(&comm, size, u, rank, &cfg); });
          return new Comm(comm);
        }), py::arg("unique_id"), py::arg("size"), py::arg("rank"), py::kw_only(), timeout,
        flowClasses, dscp, ternary);
  c.def_static("from_env", [](py::object timeout, py::object flowClasses, py::object dscp,
                              py::object ternary) {
    ternConfig_t cfg = configOf(timeout, flowClasses, dscp, ternary);
    ternComm_t comm;
    call(nullptr, [&] { return ternCommInitFromEnvConfig(&comm, &cfg); });
    return new Comm(comm);
  }, py::kw_only(), timeout, flowClasses, dscp, ternary, py::return_value_policy::take_ownership,
     "From ternrun / mpirun / srun / torchrun variables (see docs/ENV.md); options as Comm()'s");
  c.def_property_readonly("rank", &Comm::rank);
  c.def_property_readonly("size", &Comm::size);
  c.def("destroy", &Comm::destroy);
  c.def("abort", &Comm::abort);
  c.def("peer_transport", [](Comm& self, int peer) {
    const char* t = ternCommPeerTransport(self.get(), peer);
    if (!t) badArgument("peer " + std::to_string(peer) + " is not a rank of this communicator");
    return std::string(t);
  });
  bindCollectives(c);
  bindTernaryOptions(c);
  bindWeightStreams(m, c);
}
