// Whether this process can use CUDA at all: a build with CUDA, a driver and
// at least one device.  Asked once (the answer is cached); on a machine
// without a driver it is simply false, never an error.
#pragma once

namespace tern {

bool cudaUsable();

// A driver function (CUDA 12.0's version of it) looked up through the
// runtime, so libtern never links libcuda; nullptr where the driver lacks it.
void* driverFunction(const char* name);

}  // namespace tern
