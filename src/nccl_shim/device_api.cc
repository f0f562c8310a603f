// The host half of NCCL's device API (nccl_device/*.h, NCCL 2.28): device
// communicators for kernels that load and store peers' memory directly
// (symmetric memory, LSA / GIN barriers, LL all-to-all).  tern moves the
// bytes itself and gives kernels no window into a peer's memory, so what
// would make such a communicator fails with a sentence; the teams are
// answered truthfully for that world: every rank's load/store team (LSA) is
// itself alone, so its rail (the ranks of the same LSA index) is the world.
// Programs built against NCCL 2.28 (PyTorch 2.11's libtorch_cuda.so) bind
// these symbols when they load, so they must exist even where unused.
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>  // types only: the shim links nothing of CUDA
#include <nccl_device.h>

#include "nccl_shim/shim.h"

using namespace shim;

namespace {

constexpr const char* kNoDeviceApi =
    "tern's NCCL shim has no device API (kernels that load and store peers' memory): tern "
    "moves the bytes itself: use the collectives and send/recv";

// The world, or (world false) this rank's LSA team: itself alone.  `what`
// names the call in the sentence a dead handle gets.
ncclTeam_t team(ncclComm_t comm, bool world, const char* what) {
  if (checkComm(comm, what) != ncclSuccess) return {0, -1, 0};
  return world ? ncclTeam_t{comm->nranks, comm->rank, 1} : ncclTeam_t{1, 0, 1};
}

}  // namespace

NCCL_SHIM_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
              ncclDevComm_t* outDevComm) {
  ncclResult_t r = checkComm(comm, "ncclDevCommCreate");
  if (r == ncclSuccess) r = fail(ncclInvalidUsage, "ncclDevCommCreate: %s", kNoDeviceApi);
  return traced(comm, r, "ncclDevCommCreate()");
}

NCCL_SHIM_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const* devComm) {
  ncclResult_t r = checkComm(comm, "ncclDevCommDestroy", /*allowRevoked=*/true);
  if (r == ncclSuccess)
    r = fail(ncclInvalidArgument,
             "ncclDevCommDestroy: %p is no device communicator (ncclDevCommCreate never makes one: "
             "%s)",
             static_cast<const void*>(devComm), kNoDeviceApi);
  return traced(comm, r, "ncclDevCommDestroy(%p)", static_cast<const void*>(devComm));
}

NCCL_SHIM_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm) { return team(comm, true, "ncclTeamWorld"); }
NCCL_SHIM_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm) { return team(comm, false, "ncclTeamLsa"); }
// The ranks of this rank's LSA index in every LSA team: with LSA teams of
// one rank, all of them.
NCCL_SHIM_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm) { return team(comm, true, "ncclTeamRail"); }

// Team rank r's world rank: teams are strided runs through this rank.
NCCL_SHIM_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t t, int r) {
  if (checkComm(comm, "ncclTeamRankToWorld") != ncclSuccess) return -1;
  return comm->rank + (r - t.rank) * t.stride;
}

// Its rank in this rank's LSA team (which holds only this rank): 0 for this
// rank, -1 for any other.
NCCL_SHIM_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t t, int r) {
  if (checkComm(comm, "ncclTeamRankToLsa") != ncclSuccess) return -1;
  return comm->rank + (r - t.rank) * t.stride == comm->rank ? 0 : -1;
}

// NCCL's own arithmetic: an LL slot carries 8 bytes of an element.
NCCL_SHIM_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  return maxElts * ((maxEltSize + 7) / 8);
}

// Requirements only feed ncclDevCommCreate, which cannot succeed: say so
// at the first step.
NCCL_SHIM_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots,
              ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  return traced(nullptr, fail(ncclInvalidUsage, "ncclLLA2ACreateRequirement: %s", kNoDeviceApi),
                "ncclLLA2ACreateRequirement(%d blocks, %d slots)", nBlocks, nSlots);
}

NCCL_SHIM_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t t, int nBarriers,
              ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  return traced(nullptr, fail(ncclInvalidUsage, "ncclLsaBarrierCreateRequirement: %s", kNoDeviceApi),
                "ncclLsaBarrierCreateRequirement(%d barriers)", nBarriers);
}

NCCL_SHIM_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t t,
              int nBarriers, ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  ncclResult_t r = checkComm(comm, "ncclGinBarrierCreateRequirement");
  if (r == ncclSuccess) r = fail(ncclInvalidUsage, "ncclGinBarrierCreateRequirement: %s", kNoDeviceApi);
  return traced(comm, r, "ncclGinBarrierCreateRequirement(%d barriers)", nBarriers);
}
