#pragma once
// NVRTC + kernel cache: the one call the CLI, the runner and the benchmarks use to turn CUDA
// source into a loadable binary.
#include <memory>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc_library.h"

namespace kvevict::jit {

// NVRTC rejected the source. The message is "<program>: CUDA compilation failed for <arch>:" +
// NVRTC's log; with #line directives in generated code the log cites the policy file's lines.
// Exit code 2: the source (a policy, or a .cu file given on the command line) is the problem.
class CompileError : public UsageError {
 public:
  CompileError(const std::string& message, std::string log) : UsageError(message), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

struct JitKernel {
  std::shared_ptr<const KernelCacheEntry> entry;  // the cubin or PTX
  bool from_cache = false;                        // false: NVRTC ran in this call
  std::string log;                                // NVRTC's warnings when it ran
  std::string cache_key;                          // hex
};

// Options every kernel gets on top of NvrtcLibrary::base_options: -lineinfo when
// KVEVICT_JIT_VERBOSE=1.
std::vector<std::string> default_jit_options();

// The cache key a request would use (exposed for tests and `kvevict compile --key`).
KernelCacheKey cache_key_for(const NvrtcRequest& request, const std::string& label);

// Compiles through the cache. Throws CompileError when NVRTC rejects the source (and, with
// KVEVICT_DUMP_CUDA_ON_ERROR=1, prints the line-numbered source to stderr first).
JitKernel compile_cached(const NvrtcRequest& request, KernelCache& cache, const std::string& label);

// The source with line numbers, for error dumps.
std::string number_lines(const std::string& source);

}  // namespace kvevict::jit
