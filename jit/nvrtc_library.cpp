// NVRTC through dlopen; see nvrtc_library.h. The entry points are declared here with the types of
// nvrtc.h (an int result and an opaque program pointer), so no CUDA header is needed to build.
#include "jit/nvrtc_library.h"

#include <cstddef>
#include <mutex>
#include <sstream>

#include "core/util/error.h"
#include "jit/dynamic_library.h"

namespace kvevict::jit {

namespace {
using nvrtcResult = int;
using nvrtcProgram = struct NvrtcProgramOpaque*;
constexpr nvrtcResult kNvrtcSuccess = 0;
constexpr nvrtcResult kNvrtcErrorCompilation = 6;
}  // namespace

struct NvrtcLibrary::Api {
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*GetNumSupportedArchs)(int*) = nullptr;   // optional (CUDA >= 11.2)
  nvrtcResult (*GetSupportedArchs)(int*) = nullptr;      // optional
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
};

const char* binary_kind_name(BinaryKind kind) { return kind == BinaryKind::Cubin ? "cubin" : "ptx"; }

int parse_arch_number(const std::string& arch) {
  std::string digits;
  if (arch.rfind("sm_", 0) == 0) digits = arch.substr(3);
  else if (arch.rfind("compute_", 0) == 0) digits = arch.substr(8);
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();
  bool valid = digits.size() >= 2 && digits.size() <= 3;
  for (char c : digits) valid = valid && c >= '0' && c <= '9';
  if (!valid) throw UsageError("invalid CUDA architecture '" + arch + "' (expected sm_XX or compute_XX, e.g. sm_80)");
  return std::stoi(digits);
}

bool arch_is_real(const std::string& arch) {
  parse_arch_number(arch);
  return arch.rfind("sm_", 0) == 0;
}

namespace {

std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> candidates;
  const std::string override_path = environment("KVEVICT_NVRTC");
  if (!override_path.empty()) return {override_path};
  const char* names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
#ifdef KVEVICT_CUDA_LIB_DIR
  dirs.push_back(KVEVICT_CUDA_LIB_DIR);
#endif
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& dir : dirs)
    for (const char* name : names) candidates.push_back(dir + "/" + name);
  for (const char* name : names) candidates.push_back(name);
  return candidates;
}

template <typename F>
void bind(void* handle, F& slot, const char* name, bool required, std::string& missing) {
  slot = reinterpret_cast<F>(find_symbol(handle, name));
  if (!slot && required) missing += std::string(missing.empty() ? "" : ", ") + name;
}

std::mutex& open_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void NvrtcLibrary::open() {
  OpenedLibrary lib = open_first_library(nvrtc_candidates());
  if (!lib.handle) {
    std::ostringstream msg;
    msg << "NVRTC (the CUDA run-time compiler) was not found; install the CUDA toolkit or set "
           "KVEVICT_NVRTC to the path of libnvrtc.so. Tried:";
    for (const auto& t : lib.tried) msg << "\n  " << t;
    throw RuntimeError(msg.str());
  }
  static Api api;
  std::string missing;
  bind(lib.handle, api.GetErrorString, "nvrtcGetErrorString", true, missing);
  bind(lib.handle, api.Version, "nvrtcVersion", true, missing);
  bind(lib.handle, api.GetNumSupportedArchs, "nvrtcGetNumSupportedArchs", false, missing);
  bind(lib.handle, api.GetSupportedArchs, "nvrtcGetSupportedArchs", false, missing);
  bind(lib.handle, api.CreateProgram, "nvrtcCreateProgram", true, missing);
  bind(lib.handle, api.DestroyProgram, "nvrtcDestroyProgram", true, missing);
  bind(lib.handle, api.CompileProgram, "nvrtcCompileProgram", true, missing);
  bind(lib.handle, api.GetProgramLogSize, "nvrtcGetProgramLogSize", true, missing);
  bind(lib.handle, api.GetProgramLog, "nvrtcGetProgramLog", true, missing);
  bind(lib.handle, api.GetPTXSize, "nvrtcGetPTXSize", true, missing);
  bind(lib.handle, api.GetPTX, "nvrtcGetPTX", true, missing);
  bind(lib.handle, api.GetCUBINSize, "nvrtcGetCUBINSize", true, missing);
  bind(lib.handle, api.GetCUBIN, "nvrtcGetCUBIN", true, missing);
  if (!missing.empty())
    throw RuntimeError(lib.path + ": not a usable NVRTC library (missing " + missing + "; NVRTC 11.2 or newer is required)");
  handle_ = lib.handle;
  api_ = &api;
  path_ = lib.path;
  if (api.Version(&major_, &minor_) != kNvrtcSuccess) throw RuntimeError(path_ + ": nvrtcVersion failed");
  int count = 0;
  if (api.GetNumSupportedArchs && api.GetSupportedArchs && api.GetNumSupportedArchs(&count) == kNvrtcSuccess &&
      count > 0 && count < 1000) {
    archs_.resize(count);
    if (api.GetSupportedArchs(archs_.data()) != kNvrtcSuccess) archs_.clear();
  }
}

NvrtcLibrary& NvrtcLibrary::instance() {
  std::lock_guard<std::mutex> lock(open_mutex());
  static NvrtcLibrary* library = nullptr;
  if (!library) {
    auto* candidate = new NvrtcLibrary();  // leaked on purpose: lives as long as the process
    try {
      candidate->open();
    } catch (...) {
      delete candidate;
      throw;
    }
    library = candidate;
  }
  return *library;
}

bool NvrtcLibrary::available(std::string* why) {
  try {
    instance();
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

std::string NvrtcLibrary::version_string() const { return std::to_string(major_) + "." + std::to_string(minor_); }

std::vector<std::string> NvrtcLibrary::base_options(const std::string& arch) {
  // -fmad=false: no fused multiply-add contraction, so the GPU rounds like the CPU interpreter
  // (which is built without contraction) and near-tied scores rank the same on both.
  return {"-arch=" + arch, "-std=c++17", "-fmad=false"};
}

NvrtcResult NvrtcLibrary::compile(const NvrtcRequest& request) const {
  const int arch_number = parse_arch_number(request.arch);
  if (!archs_.empty()) {
    bool supported = false;
    std::string known;
    for (int a : archs_) {
      supported = supported || a == arch_number;
      known += (known.empty() ? "" : ", ") + std::string("sm_") + std::to_string(a);
    }
    if (!supported)
      throw UsageError("NVRTC " + version_string() + " cannot target " + request.arch + " (it supports " + known + ")");
  }
  NvrtcResult result;
  result.kind = arch_is_real(request.arch) ? BinaryKind::Cubin : BinaryKind::Ptx;
  result.full_options = base_options(request.arch);
  result.full_options.insert(result.full_options.end(), request.options.begin(), request.options.end());

  nvrtcProgram program = nullptr;
  nvrtcResult rc = api_->CreateProgram(&program, request.source.c_str(), request.name.c_str(), 0, nullptr, nullptr);
  if (rc != kNvrtcSuccess) throw RuntimeError(std::string("nvrtcCreateProgram failed: ") + api_->GetErrorString(rc));
  struct Guard {
    const Api* api;
    nvrtcProgram* program;
    ~Guard() { api->DestroyProgram(program); }
  } guard{api_, &program};

  std::vector<const char*> argv;
  for (const auto& option : result.full_options) argv.push_back(option.c_str());
  rc = api_->CompileProgram(program, static_cast<int>(argv.size()), argv.data());

  size_t log_size = 0;
  if (api_->GetProgramLogSize(program, &log_size) == kNvrtcSuccess && log_size > 1) {
    result.log.resize(log_size);
    api_->GetProgramLog(program, result.log.data());
    while (!result.log.empty() && (result.log.back() == '\0' || result.log.back() == '\n')) result.log.pop_back();
  }
  if (rc == kNvrtcErrorCompilation) return result;
  if (rc != kNvrtcSuccess) throw RuntimeError(std::string("nvrtcCompileProgram failed: ") + api_->GetErrorString(rc));

  auto fetch_ptx = [&]() -> bool {
    size_t size = 0;
    if (api_->GetPTXSize(program, &size) != kNvrtcSuccess || size == 0) return false;
    std::string text(size, '\0');
    if (api_->GetPTX(program, text.data()) != kNvrtcSuccess) return false;
    while (!text.empty() && text.back() == '\0') text.pop_back();
    result.ptx = std::move(text);
    return true;
  };
  if (result.kind == BinaryKind::Cubin) {
    size_t size = 0;
    rc = api_->GetCUBINSize(program, &size);
    if (rc != kNvrtcSuccess || size == 0) throw RuntimeError("nvrtcGetCUBINSize failed for " + request.arch);
    result.binary.resize(size);
    rc = api_->GetCUBIN(program, reinterpret_cast<char*>(result.binary.data()));
    if (rc != kNvrtcSuccess) throw RuntimeError(std::string("nvrtcGetCUBIN failed: ") + api_->GetErrorString(rc));
    if (request.want_ptx) fetch_ptx();  // NVRTC may not keep PTX for a real arch; the caller checks
  } else {
    if (!fetch_ptx()) throw RuntimeError("nvrtcGetPTX failed for " + request.arch);
    result.binary.assign(result.ptx.begin(), result.ptx.end());
    result.binary.push_back(0);  // cuModuleLoadData wants NUL-terminated PTX
  }
  result.ok = true;
  return result;
}

}  // namespace kvevict::jit
