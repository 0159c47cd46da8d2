#pragma once
// OpenBLAS kernels that match the CPU. Debian's OpenBLAS (a DYNAMIC_ARCH build, 0.3.21) picks its
// kernels from the CPU model when the library loads; a model newer than the library (Intel family
// 6 model 207, an Emerald Rapids Xeon, measured) falls back to the generic "Prescott" SSE3 kernels,
// and SGEMM, the decoder's prefill attention and weight products, runs about 5x slower (a
// 4096-token SmolLM2 prefill: 68 s CPU with Prescott, 15 s with SkylakeX, same machine). The
// library reads its choice from OPENBLAS_CORETYPE while it loads, before main, so the only remedy
// from inside the program is to start it again with the variable set.
namespace kvevict {

// The OpenBLAS core type this CPU should use when the library fell back to Prescott: "SkylakeX"
// with AVX-512 (F, BW, DQ, VL), "Haswell" with AVX2 and FMA; nullptr when no change is needed (the
// library chose a real kernel set, or the CPU has neither). Pure: the library's name and the CPU's
// features are its inputs, so it is tested without restarting anything.
const char* blas_core_type_override(const char* library_core, bool avx512, bool avx2_fma);

// Called first thing in main (and by the test binaries' static initialiser,
// tests/blas_kernels_init.cpp, so that tests run the kernels users run): when OPENBLAS_CORETYPE is
// unset and blas_core_type_override gives a type, sets the variable and restarts the program
// (/proc/self/exe with the arguments of /proc/self/cmdline, the same environment). Returns when no
// restart is needed, or when the restart failed (then one line on stderr, and the slow kernels
// stay). OPENBLAS_CORETYPE set by the user is never overridden.
void use_matching_blas_kernels();

}  // namespace kvevict
