#pragma once
// The one way host code (the engine, the observers) copies a signal a decoder left in device
// memory to the host, in a build with or without CUDA.
#include <cstddef>
#include <vector>

namespace kvevict {

// Copies `floats` floats at device address `device` into `host` (resized): synchronous, on the
// legacy default stream, so after the kernels that wrote them. RuntimeError naming `what` in a build
// without CUDA or when the copy fails.
void download_device_floats(const float* device, size_t floats, std::vector<float>& host, const char* what);

}  // namespace kvevict
