#pragma once
// The status of the kernel just launched, for every launcher's check (CUDA translation units only).
// cudaGetLastError reports a launch that could not start (a bad configuration); a fault while the
// kernel runs surfaces only at a later synchronising call, named after that call. With
// KVEVICT_CUDA_SYNC_LAUNCHES=1 in the environment each launch is also synchronised, so such a
// fault is reported naming its kernel: scripts/device-check.sh sets it for the GPU tests (never for
// the benchmarks: it serialises host and device).
#include <cuda_runtime.h>

#include <cstdlib>

namespace kvevict::cuda {

inline cudaError_t launch_status() {
  static const bool synchronise = [] {
    const char* v = std::getenv("KVEVICT_CUDA_SYNC_LAUNCHES");
    return v != nullptr && v[0] == '1';
  }();
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && synchronise) e = cudaDeviceSynchronize();
  return e;
}

}  // namespace kvevict::cuda
