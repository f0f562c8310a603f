// ternary_gpu_check: runs the CUDA ternary kernels on the device, checks them
// bit for bit against the CPU reference kernels, and times them against the
// device's measured copy bandwidth.  Exit code 0 only if every check passed.
//   ternary_gpu_check [elements]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codec/ternary_cpu.h"
#include "codec/ternary_cuda.h"
#include "cuda_ok.h"

using namespace tern;

static int failures = 0;

template <class T>
static void expectSame(const char* what, const std::vector<T>& cpu, const T* dev, size_t n) {
  std::vector<T> host(n);
  CUDA_OK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i)
    if (memcmp(&host[i], &cpu[i], sizeof(T))) {
      printf("MISMATCH %s at %zu\n", what, i);
      ++failures;
      return;
    }
  printf("ok  %s (%zu words)\n", what, n);
}

// Correctness on ragged sizes, odd group offsets and all input types.
static void checkAgainstCpu(ternDataType_t dt, size_t count, size_t g0) {
  const uint32_t block = 128;
  size_t esz = dt == ternFloat32 ? 4 : 2;
  std::vector<char> g(count * esz);
  for (size_t i = 0; i < count; ++i) {
    float v = static_cast<float>(static_cast<int>((i * 2654435761u) % 2001) - 1000) / 997.f;
    if (dt == ternFloat32) memcpy(&g[4 * i], &v, 4);
    else {
      uint16_t h = dt == ternFloat16 ? floatToHalf(v) : floatToBf16(v);
      memcpy(&g[2 * i], &h, 2);
    }
  }
  std::vector<float> scales((count + block - 1) / block);
  ternaryBlockStats(g.data(), dt, count, block, scales.data(), nullptr);
  TernaryKey key = ternaryKey(99, 5, 1234);
  size_t groups = (count + 31) / 32, n = groups - g0;
  const TernaryKernels& ref = *ternaryKernelsFor("scalar");
  TernaryInput hin{g.data(), dt, count, scales.data(), block, key};
  std::vector<uint32_t> cEnc(2 * n), cIn(3 * n), cAdd(4 * n);
  ref.encode(hin, g0, n, cEnc.data());
  for (size_t k = 0; k < n; ++k) {  // arbitrary width-3 planes, sign-extended
    cIn[3 * k] = static_cast<uint32_t>(k * 0x9E3779B9u);
    cIn[3 * k + 1] = cIn[3 * k + 2] = static_cast<uint32_t>(k * 0x85EBCA6Bu);
  }
  ref.addEncode(hin, g0, n, cIn.data(), 3, cAdd.data(), 4);
  std::vector<float> cDec(count, -7.f);
  ref.decode(cAdd.data(), 4, g0, n, scales.data(), block, count, ternFloat32, 3, cDec.data());
  // Error feedback: the fused encode codes g + residual and rewrites the residual.
  std::vector<float> cRes(count);
  for (size_t i = 0; i < count; ++i) cRes[i] = static_cast<float>(static_cast<int>(i % 37) - 18) / 61.f;
  std::vector<float> res0 = cRes;
  std::vector<uint32_t> cEf(2 * n);
  TernaryInput hef = hin;
  hef.residual = cRes.data();
  ref.encode(hef, g0, n, cEf.data());

  void *dG, *dDec;
  float* dS;
  uint32_t *dEnc, *dIn, *dAdd, *dEf;
  float* dRes;
  CUDA_OK(cudaMalloc(&dG, g.size()));
  CUDA_OK(cudaMalloc(&dS, scales.size() * 4));
  CUDA_OK(cudaMalloc(&dEnc, cEnc.size() * 4));
  CUDA_OK(cudaMalloc(&dIn, cIn.size() * 4));
  CUDA_OK(cudaMalloc(&dAdd, cAdd.size() * 4));
  CUDA_OK(cudaMalloc(&dDec, count * 4));
  CUDA_OK(cudaMalloc(&dEf, cEf.size() * 4));
  CUDA_OK(cudaMalloc(&dRes, count * 4));
  CUDA_OK(cudaMemcpy(dRes, res0.data(), count * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dG, g.data(), g.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dS, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dIn, cIn.data(), cIn.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> init(count, -7.f);
  CUDA_OK(cudaMemcpy(dDec, init.data(), count * 4, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreate(&st));
  TernaryDeviceInput din{dG, dt, count, dS, block, key};
  CUDA_OK(static_cast<cudaError_t>(ternaryCudaEncode(din, g0, n, dEnc, st)));
  CUDA_OK(static_cast<cudaError_t>(ternaryCudaAddEncode(din, g0, n, dIn, 3, dAdd, 4, st)));
  CUDA_OK(static_cast<cudaError_t>(
      ternaryCudaDecode(dAdd, 4, g0, n, dS, block, count, ternFloat32, 3, dDec, st)));
  TernaryDeviceInput def = din;
  def.residual = dRes;
  CUDA_OK(static_cast<cudaError_t>(ternaryCudaEncode(def, g0, n, dEf, st)));
  CUDA_OK(cudaStreamSynchronize(st));
  char what[96];
  snprintf(what, sizeof what, "encode dt=%d count=%zu g0=%zu", dt, count, g0);
  expectSame(what, cEnc, dEnc, cEnc.size());
  snprintf(what, sizeof what, "addEncode dt=%d count=%zu g0=%zu", dt, count, g0);
  expectSame(what, cAdd, dAdd, cAdd.size());
  snprintf(what, sizeof what, "decode dt=%d count=%zu g0=%zu", dt, count, g0);
  expectSame(what, cDec, static_cast<float*>(dDec), count);
  snprintf(what, sizeof what, "error feedback codes dt=%d count=%zu g0=%zu", dt, count, g0);
  expectSame(what, cEf, dEf, cEf.size());
  snprintf(what, sizeof what, "error feedback residuals dt=%d count=%zu g0=%zu", dt, count, g0);
  expectSame(what, cRes, dRes, count);
  cudaFree(dEf); cudaFree(dRes);
  cudaFree(dG); cudaFree(dS); cudaFree(dEnc); cudaFree(dIn); cudaFree(dAdd); cudaFree(dDec);
  cudaStreamDestroy(st);
}

int main(int argc, char** argv) {
  size_t count = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t(64) << 20);
  count = count / 64 * 64;
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  printf("# device: %s (sm_%d%d), %zu MiB\n", prop.name, prop.major, prop.minor,
         prop.totalGlobalMem >> 20);
  for (int units : {1, 4, 2})  // every build of the encode kernels; the default last
    for (ternDataType_t dt : {ternFloat32, ternFloat16, ternBfloat16})
      for (size_t c : {size_t(1), size_t(1000), size_t(4096 + 33)})
        for (size_t g0 : {size_t(0), size_t(1), size_t(3)})
          if (g0 < (c + 31) / 32 && ternaryCudaSetUnits(units)) checkAgainstCpu(dt, c, g0);

  // Throughput against the device copy bandwidth.
  const uint32_t block = 256;
  size_t groups = count / 32;
  float *dG, *dS, *dOut, *dCopy;
  uint32_t *dIn, *dP;
  CUDA_OK(cudaMalloc(&dG, count * 4));
  CUDA_OK(cudaMalloc(&dCopy, count * 4));
  CUDA_OK(cudaMalloc(&dOut, count * 4));
  CUDA_OK(cudaMalloc(&dS, (count / block + 1) * 4));
  CUDA_OK(cudaMalloc(&dIn, groups * 4 * 4));
  CUDA_OK(cudaMalloc(&dP, groups * 5 * 4));
  std::vector<float> ones(count / block + 1, 1.0f);
  CUDA_OK(cudaMemcpy(dS, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dG, 0x3e, count * 4));  // ~0.19 everywhere
  CUDA_OK(cudaMemset(dIn, 0, groups * 16));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreate(&st));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  TernaryDeviceInput din{dG, ternFloat32, count, dS, block, ternaryKey(1, 0, 0)};
  auto time = [&](auto fn) {
    fn();
    CUDA_OK(cudaStreamSynchronize(st));
    const int iters = 20;
    cudaEventRecord(a, st);
    for (int i = 0; i < iters; ++i) fn();
    cudaEventRecord(b, st);
    CUDA_OK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    return count * 4.0 / (ms / iters * 1e-3) / 1e9;  // GB/s of float32 input
  };
  double copy = time([&] { cudaMemcpyAsync(dCopy, dG, count * 4, cudaMemcpyDeviceToDevice, st); });
  double enc = time([&] { ternaryCudaEncode(din, 0, groups, dP, st); });
  double add = time([&] { ternaryCudaAddEncode(din, 0, groups, dIn, 4, dP, 5, st); });
  TernaryDeviceInput def = din;  // error feedback: residuals in dOut (zero)
  def.residual = dOut;
  CUDA_OK(cudaMemset(dOut, 0, count * 4));
  double ef = time([&] { ternaryCudaEncode(def, 0, groups, dP, st); });
  double dec = time([&] {
    ternaryCudaDecode(dP, 5, 0, groups, dS, block, count, ternFloat32, 0, dOut, st);
  });
  printf("# %zu float32 elements; GB/s of float32 input (decode: of float32 output)\n", count);
  printf("  device copy (D2D memcpy)     %8.1f GB/s\n", copy);
  printf("  encode                       %8.1f GB/s  %5.1f%% of copy\n", enc, 100 * enc / copy);
  printf("  fused decode-add-encode w4->5 %7.1f GB/s  %5.1f%% of copy\n", add, 100 * add / copy);
  // Reads g and the residual, writes the residual: 3x the bytes of encode.
  printf("  encode + error feedback       %7.1f GB/s  %5.1f%% of copy (3 streams of floats)\n", ef,
         100 * ef / copy);
  printf("  decode                       %8.1f GB/s  %5.1f%% of copy\n", dec, 100 * dec / copy);
  // Error feedback moves 3 floats per element (g read, residual read and
  // written) where copy moves 2: at most 2/3 of copy's input rate.
  printf("  (error feedback's bound: 66.7%% of copy, 3 streams of floats against copy's 2)\n");
  // The encode kernels' units per warp (ternaryCudaSetUnits), each timed.
  printf("# units of 4 groups per warp: %% of copy (encode, fused, error feedback)\n");
  for (int units : {1, 2, 4}) {
    ternaryCudaSetUnits(units);
    double e = time([&] { ternaryCudaEncode(din, 0, groups, dP, st); });
    double a = time([&] { ternaryCudaAddEncode(din, 0, groups, dIn, 4, dP, 5, st); });
    double f = time([&] { ternaryCudaEncode(def, 0, groups, dP, st); });
    printf("  units %d: %5.1f%% %5.1f%% %5.1f%%\n", units, 100 * e / copy, 100 * a / copy, 100 * f / copy);
  }
  ternaryCudaSetUnits(2);
  printf("# %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
