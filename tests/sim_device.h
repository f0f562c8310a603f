// The simulated device (src/memory/simulated.h) as device_cases.h's Device:
// its stream's work gated, so an operation must wait for the stream.
#pragma once
#include <memory>

#include "device_cases.h"
#include "memory/simulated.h"

namespace terntest {

inline Device simDevice(tern::sim::Stream* s,
                        std::shared_ptr<std::shared_ptr<tern::sim::Latch>> gate =
                            std::make_shared<std::shared_ptr<tern::sim::Latch>>()) {
  namespace sim = tern::sim;
  Device d;
  d.stream = reinterpret_cast<ternStream_t>(s);
  d.alloc = [](size_t n) { return sim::alloc(n); };
  d.holdBack = [s, gate] {
    auto g = *gate = std::make_shared<sim::Latch>();
    sim::enqueue(s, [g] { g->wait(); });
  };
  d.upload = [s](void* dev, const void* host, size_t n) { sim::memcpyAsync(s, dev, host, n); };
  d.download = [s](void* host, const void* dev, size_t n) { sim::memcpyAsync(s, host, dev, n); };
  d.letGo = [gate] { (*gate)->release(); };
  d.sync = [s] { sim::synchronize(s); };
  return d;
}

}  // namespace terntest
