// Linked into every test binary: before main, restart with the OpenBLAS kernels this CPU should use
// (core/decode/blas_kernels.h), so the tests run the same kernels as kvevict itself. Without it, on
// a CPU the library does not know, the decoder's products ran the generic Prescott kernels and a
// near-tie in one reference test (LinalgPolicies.CompactorKeepsTheReferenceSet, sanitizer build)
// fell the other way from every configuration kvevict actually runs.
#include "core/decode/blas_kernels.h"

namespace {
const bool kBlasKernelsChosen = (kvevict::use_matching_blas_kernels(), true);
}  // namespace
