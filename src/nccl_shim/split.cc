// ncclCommSplit and ncclCommShrink over tern, which has no split of its own:
// the new communicator's members are agreed on (Split: an allgather of
// (color, key) on the parent; Shrink: every survivor computes the same list
// from excludeRanksList), the first member makes a tern unique id and sends
// it to the others over the parent's point-to-point links, and every member
// joins with ternCommInitRankConfig.  Excluded ranks of a Shrink take no
// part, as NCCL requires (they may be dead).
#include <algorithm>
#include <cstring>

#include "nccl_shim/shim.h"

using namespace shim;

namespace {

// tern's result, waited for when the parent is nonblocking.
ncclResult_t settle(ncclComm_t parent, ternResult_t tr) {
  ncclResult_t r = fromTern(parent, tr);
  return r == ncclInProgress ? waitIdle(parent) : r;
}

// members are parent ranks, members[0] makes the id; every member gets it.
ncclResult_t shareId(ncclComm_t parent, const std::vector<int>& members, ncclUniqueId* id) {
  ternUniqueId tid;
  if (parent->rank != members[0])
    return settle(parent, ternRecv(id, sizeof tid, ternUint8, members[0], parent->tern, nullptr));
  if (ncclResult_t r = fromTern(parent, ternGetUniqueId(&tid))) return r;
  memcpy(id, &tid, sizeof tid);
  if (members.size() == 1) return ncclSuccess;
  ternGroupStart();  // one send per member, all in flight together
  ternResult_t first = ternSuccess;
  for (size_t i = 1; i < members.size(); ++i) {
    ternResult_t s = ternSend(id, sizeof tid, ternUint8, members[i], parent->tern, nullptr);
    if (first == ternSuccess && s != ternSuccess && s != ternInProgress) first = s;
  }
  ternResult_t end = ternGroupEnd();
  return settle(parent, first != ternSuccess ? first : end);
}

// Joins the communicator of `members` (parent ranks in new-rank order).
ncclResult_t join(ncclComm_t parent, const std::vector<int>& members, ncclComm_t* newcomm,
                  ncclConfig_t* config, const char* what) {
  int me = static_cast<int>(std::find(members.begin(), members.end(), parent->rank) - members.begin());
  ncclUniqueId id;
  if (ncclResult_t r = shareId(parent, members, &id)) return r;
  return startInit(newcomm, static_cast<int>(members.size()), id, me, config, parent->config, what);
}

ncclResult_t checkParent(ncclComm_t comm, ncclComm_t* newcomm, const char* what) {
  if (ncclResult_t r = checkComm(comm, what, /*allowRevoked=*/true)) return r;
  if (!newcomm) return fail(ncclInvalidArgument, "%s: newcomm is NULL", what);
  *newcomm = nullptr;
  if (inGroup())
    return fail(ncclInvalidUsage,
                "%s: tern's shim makes the new communicator at once, so it cannot be called "
                "inside ncclGroupStart/ncclGroupEnd",
                what);
  return ncclSuccess;
}

ncclResult_t split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* what = "ncclCommSplit";
  if (ncclResult_t r = checkParent(comm, newcomm, what)) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "%s: color %d is negative and not NCCL_SPLIT_NOCOLOR", what, color);
  const int n = comm->nranks;
  int mine[2] = {color, key};
  std::vector<int> all(2 * n);
  if (ncclResult_t r = settle(comm, ternAllGather(mine, all.data(), 2, ternInt32, comm->tern, nullptr)))
    return r;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;  // *newcomm stays NULL
  std::vector<int> members;
  for (int p = 0; p < n; ++p)
    if (all[2 * p] == color) members.push_back(p);
  std::stable_sort(members.begin(), members.end(),  // by key, ties by parent rank
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  return join(comm, members, newcomm, config, what);
}

ncclResult_t shrink(ncclComm_t comm, const int* exclude, int nExclude, ncclComm_t* newcomm,
                    ncclConfig_t* config, int flags) {
  const char* what = "ncclCommShrink";
  if (ncclResult_t r = checkParent(comm, newcomm, what)) return r;
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return fail(ncclInvalidArgument, "%s: shrinkFlags %d is not a NCCL_SHRINK_* value", what, flags);
  if (nExclude < 0 || (nExclude > 0 && !exclude))
    return fail(ncclInvalidArgument, "%s: excludeRanksCount %d with excludeRanksList %p", what, nExclude,
                (const void*)exclude);
  std::vector<bool> out(comm->nranks, false);
  for (int i = 0; i < nExclude; ++i) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks)
      return fail(ncclInvalidArgument, "%s: excluded rank %d is not in [0, %d)", what, exclude[i],
                  comm->nranks);
    if (exclude[i] == comm->rank)
      return fail(ncclInvalidArgument,
                  "%s: rank %d is in excludeRanksList, so it must not call ncclCommShrink", what, comm->rank);
    out[exclude[i]] = true;
  }
  ternResult_t health = ternSuccess;
  ternCommGetAsyncError(comm->tern, &health);
  if (health != ternSuccess && health != ternInProgress)
    return fail(ncclInvalidUsage,
                "%s: the parent communicator has failed (%s), and tern's shim builds the new one "
                "over the parent's links; make a new communicator from a fresh ncclUniqueId",
                what, ternGetErrorString(health));
  if (flags == NCCL_SHRINK_ABORT) waitIdle(comm);  // tern cannot cancel; let them finish or fail
  std::vector<int> members;
  for (int p = 0; p < comm->nranks; ++p)
    if (!out[p]) members.push_back(p);
  return join(comm, members, newcomm, config, what);
}

}  // namespace

NCCL_SHIM_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key,
              ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t r = split(comm, color, key, newcomm, config);
  return traced(comm, r, "ncclCommSplit(color=%d, key=%d) -> rank %d", color, key,
                newcomm && *newcomm ? (*newcomm)->rank : -1);
}

NCCL_SHIM_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList,
              int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  ncclResult_t r = shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  return traced(comm, r, "ncclCommShrink(excluded=%d, flags=%d) -> rank %d", excludeRanksCount,
                shrinkFlags, newcomm && *newcomm ? (*newcomm)->rank : -1);
}
