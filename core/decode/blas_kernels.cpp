// use_matching_blas_kernels; see blas_kernels.h.
#include "core/decode/blas_kernels.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace kvevict {

const char* blas_core_type_override(const char* library_core, bool avx512, bool avx2_fma) {
  if (!library_core || strcasecmp(library_core, "Prescott") != 0) return nullptr;
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return nullptr;
}

namespace {

// The program's arguments as the kernel recorded them (at most 1 MiB; empty if unreadable).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all;
  char buffer[4096];
  while (in && all.size() < (size_t(1) << 20)) {
    in.read(buffer, sizeof buffer);
    all.append(buffer, static_cast<size_t>(in.gcount()));
  }
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

}  // namespace

void use_matching_blas_kernels() {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx512 = false, avx2_fma = false;
#endif
  const char* type = blas_core_type_override(openblas_get_corename(), avx512, avx2_fma);
  if (!type) return;
  std::vector<std::string> args = own_arguments();
  if (args.empty() || setenv("OPENBLAS_CORETYPE", type, 1) != 0) return;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "kvevict: note: OpenBLAS chose its generic kernels for this CPU and restarting with "
                       "OPENBLAS_CORETYPE=%s failed (%s); set it yourself for about 5x faster prefill\n",
               type, std::strerror(errno));
}

}  // namespace kvevict
