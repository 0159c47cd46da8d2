#pragma once
// The CUDA driver API (libcuda.so.1), opened with dlopen on first use: the same kvevict binary
// starts on machines with no GPU and no driver, and only fails when a GPU is actually requested.
// $KVEVICT_CUDA_DRIVER overrides the library path (tests point it at a missing file to simulate a
// machine without a driver).
//
// This is the minimum a kernel runner needs: devices, one primary context per device, modules
// from cubin/PTX, launches, device memory and events for timing. Every failing call throws
// RuntimeError("<call>: <driver's error string>").
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::jit {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};

struct CudaProbe {
  bool usable = false;       // the driver opened, initialised and reports at least one device
  std::string reason;        // why not, in words, when !usable
  int driver_version = 0;    // e.g. 13000
  std::vector<CudaDeviceInfo> devices;
};

class CudaDriver {
 public:
  // Opens and initialises the driver; throws RuntimeError when it is absent or cuInit fails.
  static CudaDriver& instance();
  // Never throws: whether a usable device exists, and why not.
  static CudaProbe probe();

  int device_count() const;
  CudaDeviceInfo device_info(int ordinal) const;
  int driver_version() const { return driver_version_; }
  const std::string& path() const { return path_; }

  struct Api;
  const Api& api() const { return *api_; }
  // Throws RuntimeError("<what>: <error string>") when result != 0.
  void check(int result, const char* what) const;

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

 private:
  CudaDriver() = default;
  void open();
  const Api* api_ = nullptr;
  std::string path_;
  int driver_version_ = 0;
};

// Makes the primary context of `ordinal` current on the calling thread (retained for the process).
void use_cuda_device(int ordinal);

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void zero();
  uint64_t address() const { return address_; }
  size_t size() const { return bytes_; }

 private:
  uint64_t address_ = 0;
  size_t bytes_ = 0;
};

// A loaded module (cubin, or NUL-terminated PTX the driver compiles for the current device).
class CudaModule {
 public:
  CudaModule(const void* image, size_t bytes);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;
  // Throws RuntimeError naming the kernel when the module has no such entry point.
  void* function(const std::string& name) const;
  // Copies `bytes` from host memory into the module's global `name` (a __device__ variable with C
  // linkage); RuntimeError when the module has no such global or its size is not `bytes`.
  void upload_global(const std::string& name, const void* host, size_t bytes) const;

 private:
  void* module_ = nullptr;
};

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
};

// Launches on the default stream; `args` are pointers to each kernel argument, as cuLaunchKernel wants.
void launch_kernel(void* function, const LaunchShape& shape, void** args);
void synchronize_device();

// Elapsed device time between two points on the default stream, in milliseconds.
class DeviceTimer {
 public:
  DeviceTimer();
  ~DeviceTimer();
  void start();
  float stop_ms();

 private:
  void* begin_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace kvevict::jit
