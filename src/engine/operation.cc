#include "engine/operation.h"

#include "tern/tern.h"

namespace tern {

const char* opKindName(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return "allreduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::AllGather: return "allgather";
    case OpKind::ReduceScatter: return "reduce-scatter";
    case OpKind::Barrier: return "barrier";
    case OpKind::Ternary: return "ternary allreduce";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::AllToAll: return "all-to-all";
    case OpKind::Gather: return "gather";
    case OpKind::Scatter: return "scatter";
  }
  return "unknown operation";
}

namespace {

const char* typeName(int dt) {
  static const char* names[] = {"int8",  "uint8",   "int32",   "uint32",  "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  return dt >= 0 && dt < ternNumTypes ? names[dt] : "?";
}

const char* opName(int op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ternNumOps ? names[op] : "?";
}

bool hasRedOp(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::Reduce || k == OpKind::ReduceScatter ||
         k == OpKind::Ternary;
}

bool hasRoot(OpKind k) {
  return k == OpKind::Broadcast || k == OpKind::Reduce || k == OpKind::Gather || k == OpKind::Scatter;
}

}  // namespace

std::string describe(const OpDesc& d) {
  std::string s = opKindName(d.kind);
  if (d.kind != OpKind::Barrier)
    s += std::string(" of ") + std::to_string(d.count) + " " + typeName(d.dtype);
  if (hasRedOp(d.kind)) s += std::string(" (") + opName(d.redop) + ")";
  if (hasRoot(d.kind)) s += " with root " + std::to_string(d.root);
  if (d.kind == OpKind::Send) s += " to rank " + std::to_string(d.root);
  if (d.kind == OpKind::Recv) s += " from rank " + std::to_string(d.root);
  return s + " at priority level " + std::to_string(d.level) + " (#" + std::to_string(d.seq) + ")";
}

std::string descMismatch(const OpDesc& mine, const OpDesc& theirs) {
  if (theirs.magic != kDescMagic)
    return "rank " + std::to_string(mine.rank) +
           " received bytes that are not an operation descriptor while starting its " +
           describe(mine) +
           ": the ranks' operations are out of step; the communicator must be aborted";
  OpDesc expect = mine;  // what the peer's descriptor should say
  expect.rank = theirs.rank;
  if (mine.kind == OpKind::Recv) {  // a receive meets the peer's send to us
    expect.kind = OpKind::Send;
    expect.root = mine.rank;
  } else if (mine.kind == OpKind::Send) {
    expect.kind = OpKind::Recv;  // (never read: sends only write)
    expect.root = mine.rank;
  }
  bool same = theirs.kind == expect.kind && theirs.count == expect.count &&
              theirs.level == expect.level && theirs.seq == expect.seq &&
              (expect.kind == OpKind::Barrier || theirs.dtype == expect.dtype) &&
              (!hasRedOp(expect.kind) || theirs.redop == expect.redop) &&
              (!(hasRoot(expect.kind) || expect.kind == OpKind::Send) || theirs.root == expect.root);
  if (same) return std::string();
  return "rank " + std::to_string(theirs.rank) + " called " + describe(theirs) + " but rank " +
         std::to_string(mine.rank) + " called " + describe(mine) +
         ": every rank must issue the same collectives in the same order at each priority "
         "level (and matching send/recv pairs); the communicator must be aborted "
         "(ternCommAbort)";
}

}  // namespace tern
