// What each collective kind's descriptor must agree on across ranks, and how
// it is named in a mismatch sentence ("allreduce of 1024 float32 (sum)").
#include "collectives/collectives.h"

namespace tern {

namespace {

using K = OpKindInfo;
constexpr uint8_t kDense = K::kCount | K::kDtype | K::kSeq;
constexpr uint8_t kReducing = kDense | K::kRedop;

K kind(OpKind id, const char* name, uint8_t match, K::Root root = K::kNoRoot) {
  K k;
  k.id = static_cast<uint8_t>(id);
  k.name = name;
  k.match = match;
  k.root = root;
  return k;
}

// A receive meets the peer's send, whose descriptor names this rank; a send
// is never read by its own kind (sends only write).
K pointToPoint(OpKind id, const char* name, OpKind peer, K::Root root, uint8_t match) {
  K k = kind(id, name, match, root);
  k.peerKind = static_cast<uint8_t>(peer);
  k.rootIsMe = true;
  return k;
}

K barrier() {
  K k = kind(OpKind::Barrier, "barrier", K::kCount | K::kSeq);
  k.showCount = false;
  return k;
}

const K kKinds[] = {
    kind(OpKind::AllReduce, "allreduce", kReducing),
    kind(OpKind::Broadcast, "broadcast", kDense | K::kRoot, K::kWithRoot),
    kind(OpKind::Reduce, "reduce", kReducing | K::kRoot, K::kWithRoot),
    kind(OpKind::AllGather, "allgather", kDense),
    kind(OpKind::ReduceScatter, "reduce-scatter", kReducing),
    barrier(),
    kind(OpKind::Ternary, "ternary allreduce", kReducing),
    pointToPoint(OpKind::Send, "send", OpKind::Recv, K::kToRank, kDense),
    pointToPoint(OpKind::Recv, "recv", OpKind::Send, K::kFromRank, kDense | K::kRoot),
    kind(OpKind::AllToAll, "all-to-all", kDense),
    kind(OpKind::Gather, "gather", kDense | K::kRoot, K::kWithRoot),
    kind(OpKind::Scatter, "scatter", kDense | K::kRoot, K::kWithRoot),
};

const bool registered = [] {
  for (const K& k : kKinds) registerOpKind(k);
  return true;
}();

}  // namespace

const OpKindInfo& collectiveKind(OpKind k) {
  (void)registered;  // keeps this file (and so the registration) linked in
  return kKinds[static_cast<int>(k) - 1];
}

}  // namespace tern
