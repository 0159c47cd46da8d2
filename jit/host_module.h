#pragma once
// Kernel text compiled for the CPU by the system C++ compiler into a shared object and opened
// with dlopen. This is how generated kernels are checked against the interpreter without a GPU:
// the prelude (kernel_abi.h) turns the CUDA-specific parts into plain C++, so the same text that
// NVRTC compiles runs on the host.
//
// Compiler: $KVEVICT_HOST_CXX, else the compiler kvevict was built with, else "c++". Flags:
// -std=c++17 -O2 -ffp-contract=off -fPIC -shared (no contraction: the interpreter is built the
// same way, so rounding matches the reference), then $KVEVICT_HOST_CXXFLAGS when set, else the
// build's default: empty, or in the sanitizer configuration (KVEVICT_SANITIZE) the sanitizer flags,
// so that host-compiled kernels are checked by ASan/UBSan like the rest of the process. The flags
// are passed to the shell unquoted (several words).
#include <string>

namespace kvevict::jit {

class HostModule {
 public:
  // Compiles `source` in `work_dir` (created if needed) and opens the result. Throws
  // RuntimeError with the compiler's output when compilation fails.
  HostModule(const std::string& source, const std::string& work_dir, const std::string& name = "kernel");
  ~HostModule();
  HostModule(const HostModule&) = delete;
  HostModule& operator=(const HostModule&) = delete;

  // The address of an extern "C" symbol; throws RuntimeError when absent.
  void* symbol(const std::string& name) const;
  const std::string& library_path() const { return library_path_; }

 private:
  void* handle_ = nullptr;
  std::string library_path_;
};

std::string host_compiler();
std::string host_compiler_flags();

}  // namespace kvevict::jit
