#pragma once
// The device memory a benchmark run holds: in use now (cudaMemGetInfo's total - free: everything on
// the device) and its sampled peak while a run lasts. 0 on the CPU or without CUDA.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>

#include "jit/device.h"
#ifdef KVEVICT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvevict::bench {

// Device memory in use now (total - free) in bytes; 0 without CUDA.
size_t device_bytes_in_use(const jit::DeviceChoice& device) {
#ifdef KVEVICT_HAVE_CUDA
  if (device.kind == jit::DeviceKind::Cuda) {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return total - free;
  }
#endif
  (void)device;
  return 0;
}

// The largest device_bytes_in_use seen while it lives: a thread polls cudaMemGetInfo every 2 ms
// (a sampled peak: an allocation freed within 2 ms can be missed). Nothing on the CPU.
class DeviceMemoryPeak {
 public:
  explicit DeviceMemoryPeak(const jit::DeviceChoice& device) : device_(device), peak_(device_bytes_in_use(device)) {
    if (device.kind != jit::DeviceKind::Cuda) return;
    poller_ = std::thread([this] {
#ifdef KVEVICT_HAVE_CUDA
      cudaSetDevice(device_.ordinal);
#endif
      while (!stop_.load()) {
        const size_t now_bytes = device_bytes_in_use(device_);
        size_t seen = peak_.load();
        while (now_bytes > seen && !peak_.compare_exchange_weak(seen, now_bytes)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~DeviceMemoryPeak() { stop(); }
  // Stops polling; returns the peak.
  size_t stop() {
    stop_.store(true);
    if (poller_.joinable()) poller_.join();
    return std::max(peak_.load(), device_bytes_in_use(device_));
  }

 private:
  jit::DeviceChoice device_;
  std::atomic<size_t> peak_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

}  // namespace kvevict::bench
