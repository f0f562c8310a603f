// What a call becomes, and waiting for it (operations.h).
#include "comm/operations.h"

#include "base/error.h"

namespace tern {

OpDesc callDesc(const Comm* c, const CollArgs& args, int level) {
  OpDesc d;
  d.magic = kDescMagic;
  d.kind = collectiveKind(args.kind).id;
  d.dtype = static_cast<uint8_t>(args.dt);
  d.redop = static_cast<uint8_t>(args.op);
  d.level = static_cast<uint8_t>(level);
  d.root = args.root;
  d.rank = c->rank;
  d.count = args.count;
  return d;
}

void makeOp(Comm* c, const OpPtr& op, const CollArgs& args, std::unique_ptr<Task> task, int level) {
  op->level = level;
  op->collective = args.kind != OpKind::Send && args.kind != OpKind::Recv;
  op->peer = op->collective ? -1 : args.root;
  op->send = args.kind == OpKind::Send;
  op->anySource = args.source != nullptr;
  op->source = args.source;
  op->desc = callDesc(c, args, op->level);
  op->task = task ? std::move(task) : makeTask(args, std::move(op->task));
}

// Waits for the last operation first: a caller that drives (Executor::wait)
// lets go of the drive token when the operation it waits for is done, and
// with work left over it hands the rest to the progress thread.  Waiting for
// the first of a send/recv pair handed the receive over in every call (a
// wake-up and a token hand-back per call: a small sendrecv took 1.9-3.0 us,
// 0.7-1.6 since, perf/RESULTS.md 2026-11-28); the last one is usually the last to
// finish, so the caller drives them all.  Failures are recorded in call
// order (the last failing operation's sentence stays, the first one's code
// is returned), as before.
ternResult_t waitAll(const IssuedOps& ops, bool hostOnly) {
  auto waited = [&](size_t i) { return !(hostOnly && ops[i].second->streamMem); };
  for (size_t i = ops.size(); i-- > 0;) {
    auto& [c, op] = ops[i];
    if (!waited(i)) continue;
    // The next one this thread waits for, if the same engine runs it: a
    // caller that finishes this one keeps driving for it (Executor::wait).
    const Operation* then = nullptr;
    for (size_t j = i; j-- > 0;)
      if (waited(j)) {
        if (ops[j].first->engine == c->engine) then = ops[j].second.get();
        break;
      }
    c->engine->wait(*op, nullptr, then);
  }
  ternResult_t first = ternSuccess;
  for (auto& issued : ops) {
    const Operation& op = *issued.second;
    if ((hostOnly && op.streamMem) || op.result == ternSuccess) continue;
    setThreadError(op.error);  // the operation's sentence, now the caller's
    if (first == ternSuccess) first = op.result;
  }
  return first;
}

}  // namespace tern

