// The CUDA driver through dlopen; see cuda_driver.h. Entry points are declared with the types of
// cuda.h (int results, int devices, opaque handles, 64-bit device pointers) so that no CUDA header
// or library is needed at build time.
#include "jit/cuda_driver.h"

#include <mutex>
#include <sstream>

#include "core/util/error.h"
#include "jit/dynamic_library.h"

namespace kvevict::jit {

namespace {
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using Handle = void*;
constexpr int kAttributeComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttributeComputeMinor = 76;
}  // namespace

struct CudaDriver::Api {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*DeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(Handle*, CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(Handle) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;
  CUresult (*ModuleLoadData)(Handle*, const void*) = nullptr;
  CUresult (*ModuleUnload)(Handle) = nullptr;
  CUresult (*ModuleGetFunction)(Handle*, Handle, const char*) = nullptr;
  CUresult (*ModuleGetGlobal)(CUdeviceptr*, size_t*, Handle, const char*) = nullptr;
  CUresult (*LaunchKernel)(Handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Handle,
                           void**, void**) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*EventCreate)(Handle*, unsigned) = nullptr;
  CUresult (*EventRecord)(Handle, Handle) = nullptr;
  CUresult (*EventSynchronize)(Handle) = nullptr;
  CUresult (*EventElapsedTime)(float*, Handle, Handle) = nullptr;
  CUresult (*EventDestroy)(Handle) = nullptr;
};

namespace {

template <typename F>
void bind(void* handle, F& slot, const char* name, std::string& missing) {
  slot = reinterpret_cast<F>(find_symbol(handle, name));
  if (!slot) missing += std::string(missing.empty() ? "" : ", ") + name;
}

std::vector<std::string> driver_candidates() {
  const std::string override_path = environment("KVEVICT_CUDA_DRIVER");
  if (!override_path.empty()) return {override_path};
  return {"libcuda.so.1", "libcuda.so"};
}

std::mutex& driver_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void CudaDriver::open() {
  OpenedLibrary lib = open_first_library(driver_candidates());
  if (!lib.handle) {
    // The usual case (no NVIDIA driver) in a few words; the loader's own text otherwise.
    bool all_absent = true;
    for (const auto& t : lib.tried) all_absent = all_absent && t.find("No such file") != std::string::npos;
    if (all_absent) throw RuntimeError("the CUDA driver is not installed (" + lib.tried.front().substr(0, lib.tried.front().find(':')) + " not found)");
    std::ostringstream msg;
    msg << "the CUDA driver cannot be opened";
    for (const auto& t : lib.tried) msg << "; " << t;
    throw RuntimeError(msg.str());
  }
  static Api api;
  std::string missing;
  bind(lib.handle, api.Init, "cuInit", missing);
  bind(lib.handle, api.DriverGetVersion, "cuDriverGetVersion", missing);
  bind(lib.handle, api.GetErrorString, "cuGetErrorString", missing);
  bind(lib.handle, api.DeviceGetCount, "cuDeviceGetCount", missing);
  bind(lib.handle, api.DeviceGet, "cuDeviceGet", missing);
  bind(lib.handle, api.DeviceGetName, "cuDeviceGetName", missing);
  bind(lib.handle, api.DeviceGetAttribute, "cuDeviceGetAttribute", missing);
  bind(lib.handle, api.DeviceTotalMem, "cuDeviceTotalMem_v2", missing);
  bind(lib.handle, api.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
  bind(lib.handle, api.CtxSetCurrent, "cuCtxSetCurrent", missing);
  bind(lib.handle, api.CtxSynchronize, "cuCtxSynchronize", missing);
  bind(lib.handle, api.ModuleLoadData, "cuModuleLoadData", missing);
  bind(lib.handle, api.ModuleUnload, "cuModuleUnload", missing);
  bind(lib.handle, api.ModuleGetFunction, "cuModuleGetFunction", missing);
  bind(lib.handle, api.ModuleGetGlobal, "cuModuleGetGlobal_v2", missing);
  bind(lib.handle, api.LaunchKernel, "cuLaunchKernel", missing);
  bind(lib.handle, api.MemAlloc, "cuMemAlloc_v2", missing);
  bind(lib.handle, api.MemFree, "cuMemFree_v2", missing);
  bind(lib.handle, api.MemcpyHtoD, "cuMemcpyHtoD_v2", missing);
  bind(lib.handle, api.MemcpyDtoH, "cuMemcpyDtoH_v2", missing);
  bind(lib.handle, api.MemsetD8, "cuMemsetD8_v2", missing);
  bind(lib.handle, api.EventCreate, "cuEventCreate", missing);
  bind(lib.handle, api.EventRecord, "cuEventRecord", missing);
  bind(lib.handle, api.EventSynchronize, "cuEventSynchronize", missing);
  const size_t missing_before = missing.size();
  bind(lib.handle, api.EventElapsedTime, "cuEventElapsedTime_v2", missing);
  if (!api.EventElapsedTime) {  // older drivers only have the unversioned name: forget only this miss
    missing.resize(missing_before);
    bind(lib.handle, api.EventElapsedTime, "cuEventElapsedTime", missing);
  }
  bind(lib.handle, api.EventDestroy, "cuEventDestroy_v2", missing);
  if (!missing.empty()) throw RuntimeError(lib.path + ": CUDA driver too old or not a driver (missing " + missing + ")");
  api_ = &api;
  path_ = lib.path;
  check(api.Init(0), "cuInit");
  check(api.DriverGetVersion(&driver_version_), "cuDriverGetVersion");
}

void CudaDriver::check(int result, const char* what) const {
  if (result == 0) return;
  const char* text = nullptr;
  if (api_ && api_->GetErrorString) api_->GetErrorString(result, &text);
  throw RuntimeError(std::string(what) + ": " + (text ? text : "CUDA error " + std::to_string(result)));
}

CudaDriver& CudaDriver::instance() {
  std::lock_guard<std::mutex> lock(driver_mutex());
  static CudaDriver* driver = nullptr;
  if (!driver) {
    auto* candidate = new CudaDriver();  // lives as long as the process
    try {
      candidate->open();
    } catch (...) {
      delete candidate;
      throw;
    }
    driver = candidate;
  }
  return *driver;
}

CudaProbe CudaDriver::probe() {
  CudaProbe result;
  try {
    CudaDriver& driver = instance();
    result.driver_version = driver.driver_version();
    const int count = driver.device_count();
    for (int i = 0; i < count; ++i) result.devices.push_back(driver.device_info(i));
    result.usable = !result.devices.empty();
    if (!result.usable) result.reason = "the CUDA driver reports no device";
  } catch (const Error& e) {
    result.reason = e.what();
  }
  return result;
}

int CudaDriver::device_count() const {
  int count = 0;
  check(api_->DeviceGetCount(&count), "cuDeviceGetCount");
  return count;
}

CudaDeviceInfo CudaDriver::device_info(int ordinal) const {
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  CUdevice device = 0;
  check(api_->DeviceGet(&device, ordinal), "cuDeviceGet");
  char name[256] = {0};
  check(api_->DeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
  info.name = name;
  check(api_->DeviceGetAttribute(&info.cc_major, kAttributeComputeMajor, device), "cuDeviceGetAttribute");
  check(api_->DeviceGetAttribute(&info.cc_minor, kAttributeComputeMinor, device), "cuDeviceGetAttribute");
  check(api_->DeviceTotalMem(&info.total_memory, device), "cuDeviceTotalMem");
  return info;
}

void use_cuda_device(int ordinal) {
  CudaDriver& driver = CudaDriver::instance();
  static std::mutex m;
  static std::vector<Handle> contexts;
  std::lock_guard<std::mutex> lock(m);
  if (ordinal < 0 || ordinal >= driver.device_count())
    throw RuntimeError("CUDA device " + std::to_string(ordinal) + " does not exist");
  if (contexts.size() <= size_t(ordinal)) contexts.resize(ordinal + 1, nullptr);
  if (!contexts[ordinal]) {
    CUdevice device = 0;
    driver.check(driver.api().DeviceGet(&device, ordinal), "cuDeviceGet");
    driver.check(driver.api().DevicePrimaryCtxRetain(&contexts[ordinal], device), "cuDevicePrimaryCtxRetain");
  }
  driver.check(driver.api().CtxSetCurrent(contexts[ordinal]), "cuCtxSetCurrent");
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  const CudaDriver& driver = CudaDriver::instance();
  CUdeviceptr address = 0;
  driver.check(driver.api().MemAlloc(&address, bytes == 0 ? 1 : bytes), "cuMemAlloc");
  address_ = address;
}

DeviceBuffer::~DeviceBuffer() {
  if (address_) CudaDriver::instance().api().MemFree(address_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : address_(other.address_), bytes_(other.bytes_) {
  other.address_ = 0;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (address_) CudaDriver::instance().api().MemFree(address_);
    address_ = other.address_;
    bytes_ = other.bytes_;
    other.address_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_) throw RuntimeError("DeviceBuffer::upload past the end of the buffer");
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().MemcpyHtoD(address_ + offset, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_) throw RuntimeError("DeviceBuffer::download past the end of the buffer");
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().MemcpyDtoH(host, address_ + offset, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::zero() {
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().MemsetD8(address_, 0, bytes_), "cuMemsetD8");
}

CudaModule::CudaModule(const void* image, size_t bytes) {
  if (!image || bytes == 0) throw RuntimeError("cannot load an empty CUDA module");
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().ModuleLoadData(&module_, image), "cuModuleLoadData");
}

CudaModule::~CudaModule() {
  if (module_) CudaDriver::instance().api().ModuleUnload(module_);
}

void* CudaModule::function(const std::string& name) const {
  const CudaDriver& driver = CudaDriver::instance();
  Handle function = nullptr;
  const int rc = driver.api().ModuleGetFunction(&function, module_, name.c_str());
  if (rc != 0) driver.check(rc, ("cuModuleGetFunction(" + name + ")").c_str());
  return function;
}

void CudaModule::upload_global(const std::string& name, const void* host, size_t bytes) const {
  const CudaDriver& driver = CudaDriver::instance();
  CUdeviceptr address = 0;
  size_t size = 0;
  const int rc = driver.api().ModuleGetGlobal(&address, &size, module_, name.c_str());
  if (rc != 0) driver.check(rc, ("cuModuleGetGlobal(" + name + ")").c_str());
  if (size != bytes)
    throw RuntimeError("CUDA module global " + name + " holds " + std::to_string(size) + " bytes, not " +
                       std::to_string(bytes));
  driver.check(driver.api().MemcpyHtoD(address, host, bytes), "cuMemcpyHtoD");
}

void launch_kernel(void* function, const LaunchShape& s, void** args) {
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().LaunchKernel(function, s.grid_x, s.grid_y, s.grid_z, s.block_x, s.block_y, s.block_z,
                                         s.shared_bytes, nullptr, args, nullptr),
               "cuLaunchKernel");
}

void synchronize_device() {
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().CtxSynchronize(), "cuCtxSynchronize");
}

DeviceTimer::DeviceTimer() {
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().EventCreate(&begin_, 0), "cuEventCreate");
  driver.check(driver.api().EventCreate(&end_, 0), "cuEventCreate");
}

DeviceTimer::~DeviceTimer() {
  const CudaDriver& driver = CudaDriver::instance();
  driver.api().EventDestroy(begin_);
  driver.api().EventDestroy(end_);
}

void DeviceTimer::start() {
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().EventRecord(begin_, nullptr), "cuEventRecord");
}

float DeviceTimer::stop_ms() {
  const CudaDriver& driver = CudaDriver::instance();
  driver.check(driver.api().EventRecord(end_, nullptr), "cuEventRecord");
  driver.check(driver.api().EventSynchronize(end_), "cuEventSynchronize");
  float ms = 0;
  driver.check(driver.api().EventElapsedTime(&ms, begin_, end_), "cuEventElapsedTime");
  return ms;
}

}  // namespace kvevict::jit
