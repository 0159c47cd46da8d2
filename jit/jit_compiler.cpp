// NVRTC through the kernel cache; see jit_compiler.h.
#include "jit/jit_compiler.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "jit/dynamic_library.h"
#include "kvevict_version.h"

namespace kvevict::jit {

std::vector<std::string> default_jit_options() {
  std::vector<std::string> options;
  const std::string verbose = environment("KVEVICT_JIT_VERBOSE");
  if (!verbose.empty() && verbose != "0") options.push_back("-lineinfo");
  return options;
}

KernelCacheKey cache_key_for(const NvrtcRequest& request, const std::string& label) {
  const NvrtcLibrary& nvrtc = NvrtcLibrary::instance();
  KernelCacheKey key;
  key.source = request.source;
  key.options = NvrtcLibrary::base_options(request.arch);
  key.options.insert(key.options.end(), request.options.begin(), request.options.end());
  key.arch = request.arch;
  key.kind = arch_is_real(request.arch) ? BinaryKind::Cubin : BinaryKind::Ptx;
  key.nvrtc_version = nvrtc.version_string();
  key.kvevict_version = std::string(KVEVICT_VERSION) + "+" + KVEVICT_GIT_COMMIT;
  key.label = label;
  return key;
}

std::string number_lines(const std::string& source) {
  std::ostringstream out;
  std::istringstream in(source);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%5d | ", ++number);
    out << prefix << line << "\n";
  }
  return out.str();
}

JitKernel compile_cached(const NvrtcRequest& request, KernelCache& cache, const std::string& label) {
  const NvrtcLibrary& nvrtc = NvrtcLibrary::instance();
  const KernelCacheKey key = cache_key_for(request, label);
  JitKernel kernel;
  kernel.cache_key = key.hex();
  bool built = false;
  kernel.entry = cache.get_or_build(
      key,
      [&]() {
        NvrtcResult result = nvrtc.compile(request);
        if (!result.ok) {
          const std::string dump = environment("KVEVICT_DUMP_CUDA_ON_ERROR");
          if (!dump.empty() && dump != "0")
            std::cerr << "kvevict: CUDA source of " << request.name << ":\n" << number_lines(request.source);
          throw CompileError(request.name + ": CUDA compilation failed for " + request.arch + ":\n" + result.log, result.log);
        }
        kernel.log = result.log;
        KernelCacheEntry entry;
        entry.kind = result.kind;
        entry.payload = std::move(result.binary);
        entry.label = label;
        entry.arch = request.arch;
        entry.nvrtc_version = key.nvrtc_version;
        entry.kvevict_version = key.kvevict_version;
        return entry;
      },
      &built);
  kernel.from_cache = !built;
  return kernel;
}

}  // namespace kvevict::jit
