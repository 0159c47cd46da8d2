// use_matching_blas_kernels; see blas_kernels.h.
#include "core/decode/blas_kernels.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvevict {

const char* blas_core_type_override(const char* library_core, bool avx512, bool avx2_fma) {
  if (!library_core || strcasecmp(library_core, "Prescott") != 0) return nullptr;
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return nullptr;
}

void use_matching_blas_kernels(char** argv) {
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
  if (!type || setenv("OPENBLAS_CORETYPE", type, 1) != 0) return;
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "kvevict: note: OpenBLAS chose its generic kernels for this CPU and restarting with "
                       "OPENBLAS_CORETYPE=%s failed (%s); set it yourself for about 5x faster prefill\n",
               type, std::strerror(errno));
}

}  // namespace kvevict
