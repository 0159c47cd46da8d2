#pragma once
// Typed device arrays for the CUDA decoder (CUDA runtime; freed on destruction) and the error check
// that turns a failing runtime or cuBLAS call into RuntimeError naming the call.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace kvevict::cuda {

// A failed allocation, apart from every other failure: optional work (giving arenas back) may
// catch this one and carry on, while a fault of an earlier kernel, which the runtime reports at
// any later call, still reaches the caller.
class DeviceOutOfMemory : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const std::string message = std::string("CUDA decoder: ") + what + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation) throw DeviceOutOfMemory(message);
  throw RuntimeError(message);
}

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count) { resize(count); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // Grows (never shrinks) the allocation; contents are not preserved when it grows. A failed
  // allocation leaves the array empty (so a later, smaller resize allocates instead of handing out
  // a null pointer) and clears the runtime's error, so the next launch check reports its own.
  void resize(size_t count) { resize_with_room(count, count); }
  // resize for scratch that grows a little at a time (a decode step's column sums, the split
  // attention's partials, the window attention): when it must grow, room for a quarter more (the
  // exact count when that much is not free), so that heads growing one entry per step do not
  // reallocate (cudaFree synchronises the device) at every step.
  void grow(size_t count) { resize_with_room(count, count + count / 4); }
  void upload(const T* host, size_t count, size_t offset = 0) {
    check(cudaMemcpy(data_ + offset, host, count * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  void upload(const std::vector<T>& host) {
    resize(host.size());
    if (!host.empty()) upload(host.data(), host.size());
  }
  void download(T* host, size_t count, size_t offset = 0) const {
    check(cudaMemcpy(host, data_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  void resize_with_room(size_t count, size_t room) {
    if (count <= capacity_) {
      size_ = count;
      return;
    }
    cudaFree(data_);
    data_ = nullptr;
    capacity_ = size_ = 0;
    cudaError_t e = cudaMalloc(&data_, room * sizeof(T));
    if (e != cudaSuccess && room > count) {
      cudaGetLastError();  // clear the failed allocation's error before trying the count alone
      room = count;
      e = cudaMalloc(&data_, room * sizeof(T));
    }
    if (e != cudaSuccess) {
      data_ = nullptr;
      cudaGetLastError();
      check(e, "cudaMalloc");
    }
    capacity_ = room;
    size_ = count;
  }
  T* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace kvevict::cuda
