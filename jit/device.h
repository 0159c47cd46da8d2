#pragma once
// `--device auto|cpu|cuda`: where kernels and the decoder run.
//   auto  (default) CUDA when the driver opens and reports a device, else the CPU; in the CPU case
//         it says so once per process on stderr, with the reason.
//   cpu   always the CPU; the CUDA driver is not even opened.
//   cuda  the first CUDA device (or cuda:N); without a usable one, RuntimeError (exit 1) naming why.
// Anything else is a UsageError (exit 2).
#include <iosfwd>
#include <string>

#include "jit/cuda_driver.h"

namespace kvevict::jit {

enum class DeviceKind { Cpu, Cuda };

struct DeviceChoice {
  DeviceKind kind = DeviceKind::Cpu;
  int ordinal = 0;          // CUDA device index when kind == Cuda
  CudaDeviceInfo info;      // filled when kind == Cuda
  std::string note;         // why auto fell back to the CPU (empty otherwise)
  std::string describe() const;  // "cpu" or "cuda:0 (NVIDIA H200, sm_90)"
};

// Resolves a --device value. `notes` receives auto's one-time fallback message (stderr when null).
DeviceChoice resolve_device(const std::string& request, std::ostream* notes = nullptr);

// The architecture to compile for: an explicit --arch wins; else the device's; else `fallback`.
std::string target_arch(const std::string& explicit_arch, const DeviceChoice& device, const std::string& fallback = "sm_80");

// Empty when this build can run CUDA code on a device now; otherwise why not: the build has no
// CUDA toolkit (no CUDA decoder or kernels), or no device is usable (the driver's reason). GPU tests
// skip with it; GPU benchmarks print it as `skipped: <reason>`.
std::string cuda_unavailable_reason();

// For tests: forget that auto's fallback message was printed.
void reset_device_notice_for_tests();

}  // namespace kvevict::jit
