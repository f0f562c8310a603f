// Tensor work of the sparse allreduce (gloo's way): each rank's coalesced
// indices and values, padded to the largest count so that one allgather
// carries every rank's, and the sum of what came back.
#pragma once
#include <ATen/ATen.h>

#include <vector>

namespace tern_torch {

// `t` zero-padded along `dim` to `size` entries.
inline at::Tensor padTo(const at::Tensor& t, int64_t dim, int64_t size) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[dim] = size;
  at::Tensor out = at::zeros(shape, t.options());
  out.narrow(dim, 0, t.size(dim)).copy_(t);
  return out;
}

// The sum of rank r's sparse tensor (the first counts[r] of idxAll[r]
// [sparse dims x most] and valAll[r] [most x dense dims...]), coalesced.
inline at::Tensor sumOfParts(const at::Tensor& idxAll, const at::Tensor& valAll,
                             const std::vector<int64_t>& counts, at::IntArrayRef sizes) {
  at::Tensor sum;
  for (size_t r = 0; r < counts.size(); ++r) {
    at::Tensor part = at::sparse_coo_tensor(idxAll[r].narrow(1, 0, counts[r]), valAll[r].narrow(0, 0, counts[r]),
                                            sizes);
    sum = sum.defined() ? sum.add(part) : part;
  }
  return sum.coalesce();
}

}  // namespace tern_torch
