#include <cuda_runtime.h>

#include <mutex>
#include <utility>
#include <vector>

#include "memory/work_streams.h"

namespace tern {

namespace {

std::mutex gMu;
std::vector<std::pair<int, cudaStream_t>> gSpare;  // (device, stream)

}  // namespace

void* borrowWorkStream() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lk(gMu);
    for (size_t i = 0; i < gSpare.size(); ++i)
      if (gSpare[i].first == dev) {
        cudaStream_t s = gSpare[i].second;
        gSpare.erase(gSpare.begin() + static_cast<long>(i));
        return s;
      }
  }
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return s;
}

void giveBackWorkStream(void* stream) {
  if (!stream) return;
  int dev = 0;
  cudaGetDevice(&dev);  // operations give back on the thread and device they ran on
  std::lock_guard<std::mutex> lk(gMu);
  gSpare.emplace_back(dev, static_cast<cudaStream_t>(stream));
}

}  // namespace tern
