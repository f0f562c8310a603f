// The host reductions (host_reduce.h): the loops of host_reduce_loops.h,
// built for the baseline instruction set and, on x86-64, for AVX2 and
// AVX-512 (with F16C for IEEE halves: host_reduce_f16c.h), the widest the
// CPU has picked at first use.
//
// The library is built for the baseline x86-64 (SSE2), where the compiler
// vectorises these loops four floats wide.  The receiver of a 2-rank reduce
// reduces every byte it gets, and at 128 KiB that loop held 12% of its
// samples (waits included): built for AVX2 the reduce took 0.74-0.82x the time, for AVX-512
// 0.82-0.93x AVX2's (perf/RESULTS.md, "2026-12-06: host reductions as wide
// as the CPU").  Each element is reduced alone, so every variant gives the
// same bits.  TERN_REDUCE_ISA=baseline|avx2|avx512 forces one (an A/B, or
// a host whose wide units slow its clock).
#include "memory/host_reduce.h"

#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <string>

#include "base/env.h"
#include "base/log.h"
#include "codec/half.h"
#include "memory/reduce_ops.h"

namespace tern {

namespace baseline_isa {
template <class Op, bool Bcast>
size_t halfVector(unsigned short*, const unsigned short*, const unsigned short*, size_t, int) {
  return 0;  // halves one by one
}
#include "memory/host_reduce_loops.h"
}  // namespace baseline_isa

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace avx2_isa {
#include "memory/host_reduce_f16c.h"
#include "memory/host_reduce_loops.h"
}  // namespace avx2_isa
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,f16c")
namespace avx512_isa {
#include "memory/host_reduce_f16c.h"
#include "memory/host_reduce_loops.h"
}  // namespace avx512_isa
#pragma GCC pop_options
#endif

namespace {

const HostReduceLoops kBaseline{"baseline", baseline_isa::reduce, baseline_isa::divide, baseline_isa::scale};
#if defined(__x86_64__)
const HostReduceLoops kAvx2{"avx2", avx2_isa::reduce, avx2_isa::divide, avx2_isa::scale};
const HostReduceLoops kAvx512{"avx512", avx512_isa::reduce, avx512_isa::divide, avx512_isa::scale};
#endif

}  // namespace

const HostReduceLoops* hostReduceLoops(const char* name) {
  const std::string isa = name;
  if (isa == "baseline") return &kBaseline;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) return nullptr;  // every AVX2 CPU has it
  if (isa == "avx2" && __builtin_cpu_supports("avx2")) return &kAvx2;
  if (isa == "avx512" && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return &kAvx512;
#endif
  return nullptr;
}

const HostReduceLoops& hostReduce() {
  static const HostReduceLoops* picked = [] {
    const std::string forced = envString("TERN_REDUCE_ISA", "");
    const HostReduceLoops* l = forced.empty() ? nullptr : hostReduceLoops(forced.c_str());
    if (!forced.empty() && !l)
      TERN_LOG(Warn,
               "TERN_REDUCE_ISA=%s: not an instruction set this CPU runs (baseline, avx2, avx512); "
               "using the widest it has",
               forced.c_str());
    for (const char* isa : {"avx512", "avx2", "baseline"})
      if (!l) l = hostReduceLoops(isa);
    TERN_LOG(Info, "host reductions: %s loops", l->name);
    return l;
  }();
  return *picked;
}

void reduceKernel(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
                  ternRedOp_t op, int avgDivisor) {
  hostReduce().reduce(dst, a, b, count, dt, op, avgDivisor);
}

void divideKernel(void* buf, size_t count, ternDataType_t dt, int divisor) {
  hostReduce().divide(buf, count, dt, divisor);
}

void scaleKernel(void* dst, const void* src, size_t count, ternDataType_t dt, const void* scalar) {
  hostReduce().scale(dst, src, count, dt, scalar);
}

}  // namespace tern
