#pragma once
// NVRTC, the CUDA run-time compiler, opened with dlopen on first use so that kvevict builds, links
// and starts on machines without the CUDA toolkit; only compiling a kernel needs it.
//
// Where the library is looked for, first hit wins:
//   1. $KVEVICT_NVRTC (a path to the library; an error if it cannot be opened)
//   2. the toolkit found at build time, then /usr/local/cuda/lib64: libnvrtc.so.13, .so.12, .so
//   3. the dynamic loader's own search path (LD_LIBRARY_PATH, ld.so.cache) with the same names
// When none opens, instance() throws RuntimeError naming every place it tried.
//
// Compilation targets one architecture: "sm_XX" yields a cubin (nvrtcGetCUBIN, -arch=sm_XX);
// "compute_XX" yields PTX (-arch=compute_XX), which the driver finishes for any later device.
#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::jit {

enum class BinaryKind { Cubin, Ptx };
const char* binary_kind_name(BinaryKind kind);  // "cubin" | "ptx"

// "sm_80" -> 80; accepts sm_XX, sm_XXa, compute_XX; throws UsageError on anything else.
int parse_arch_number(const std::string& arch);
// True for "sm_*" (a real architecture: cubin), false for "compute_*" (virtual: PTX).
bool arch_is_real(const std::string& arch);

struct NvrtcRequest {
  std::string name = "kernel.cu";         // the program name NVRTC uses in its messages
  std::string source;
  std::string arch = "sm_80";             // sm_XX -> cubin; compute_XX -> PTX
  std::vector<std::string> options;       // extra NVRTC options, e.g. "-std=c++17", "-lineinfo"
  bool want_ptx = false;                  // also return the PTX text (for --emit ptx)
};

struct NvrtcResult {
  bool ok = false;
  std::string log;                        // NVRTC's log (warnings even on success)
  BinaryKind kind = BinaryKind::Cubin;
  std::vector<uint8_t> binary;            // the cubin, or the PTX text with its trailing NUL
  std::string ptx;                        // filled when want_ptx (and always when kind == Ptx)
  std::vector<std::string> full_options;  // every option passed, in order (part of cache keys)
};

class NvrtcLibrary {
 public:
  // The process-wide instance, opened on first call. Throws RuntimeError when NVRTC is absent.
  static NvrtcLibrary& instance();
  // True when instance() would succeed; `why` receives the reason when it would not.
  static bool available(std::string* why = nullptr);

  const std::string& path() const { return path_; }
  int version_major() const { return major_; }
  int version_minor() const { return minor_; }
  std::string version_string() const;  // "13.0"
  // Architectures this NVRTC can target, e.g. {75, 80, 86, 89, 90, 100, ...}; empty if unknown.
  const std::vector<int>& supported_archs() const { return archs_; }

  // The options every compile passes before request.options (architecture, language standard).
  static std::vector<std::string> base_options(const std::string& arch);

  // Compiles; never throws for a compile error (ok=false, log filled). Throws RuntimeError for a
  // failure of NVRTC itself and UsageError for an architecture this NVRTC does not support.
  NvrtcResult compile(const NvrtcRequest& request) const;

  NvrtcLibrary(const NvrtcLibrary&) = delete;
  NvrtcLibrary& operator=(const NvrtcLibrary&) = delete;

 private:
  NvrtcLibrary() = default;
  struct Api;
  void open();

  void* handle_ = nullptr;
  const Api* api_ = nullptr;
  std::string path_;
  int major_ = 0, minor_ = 0;
  std::vector<int> archs_;
};

}  // namespace kvevict::jit
