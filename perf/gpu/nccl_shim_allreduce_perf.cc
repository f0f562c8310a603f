// nccl_shim_allreduce_perf: the allreduce table, same flags as tern's
// all_reduce_perf, measured through NCCL's ABI (ncclAllReduce of tern's
// libnccl.so.2, compiled against the toolkit's real nccl.h) on host buffers.
// Beside all_reduce_perf it shows what the shim costs per call.  Launch with
// ternrun (or mpirun); the ncclUniqueId travels over a tern communicator made
// from the launcher's environment, which is then left idle.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

#include "common.h"

namespace {

class NcclBackend : public ternperf::Backend {
 public:
  NcclBackend() {
    if (ternCommInitFromEnv(&boot_) != ternSuccess) die("ternCommInitFromEnv", ternGetLastError(nullptr));
    ternCommUserRank(boot_, &rank_);
    ternCommCount(boot_, &size_);
    ncclUniqueId id;
    if (rank_ == 0 && ncclGetUniqueId(&id) != ncclSuccess) die("ncclGetUniqueId", ncclGetLastError(nullptr));
    if (ternBroadcast(&id, &id, sizeof id, ternUint8, 0, boot_, nullptr) != ternSuccess)
      die("ternBroadcast", ternGetLastError(boot_));
    if (ncclCommInitRank(&comm_, size_, id, rank_) != ncclSuccess)
      die("ncclCommInitRank", ncclGetLastError(nullptr));
  }
  ~NcclBackend() override {
    ncclCommDestroy(comm_);
    ternCommDestroy(boot_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return ternCommPeerTransport(boot_, (rank_ + 1) % size_); }
  bool allReduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    // NCCL's datatype and op numbers are tern's (the shim checks it at compile time).
    return ncclAllReduce(s, r, n, static_cast<ncclDataType_t>(dt), static_cast<ncclRedOp_t>(op),
                         comm_, nullptr) == ncclSuccess;
  }
  bool barrier() override {
    int x = 0;
    return ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm_, nullptr) == ncclSuccess;
  }
  const char* lastError() const override { return ncclGetLastError(comm_); }

 private:
  static void die(const char* what, const char* why) {
    fprintf(stderr, "nccl_shim_allreduce_perf: %s failed: %s\n", what, why);
    exit(1);
  }
  ternComm_t boot_ = nullptr;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  NcclBackend nccl;
  return ternperf::perfMain(argc, argv, ternperf::kAllReduceTest, &nccl);
}
