// `kvevict version`: version, commit and build features, for bug reports and provenance.
#include <iostream>

#include "cli/command.h"
#include "core/decode/make_decoder.h"
#include "kvevict_version.h"

namespace {

std::function<int()> setup_version(CLI::App& app) {
  (void)app;
  return [] {
    std::cout << "kvevict " << KVEVICT_VERSION << " (commit " << KVEVICT_GIT_COMMIT << ")\n";
#ifdef KVEVICT_HAVE_CUDA
    std::cout << "CUDA support: built\n";
    // The tensor-core prefill (docs/CUDA.md "FlashInfer prefill"): built when scripts/build.sh
    // fetched FlashInfer's headers; without it, prompts on a GPU take the own fp32 kernel.
    std::cout << "FlashInfer prefill: " << (kvevict::flashinfer_prefill_built() ? "built" : "not built") << "\n";
#else
    std::cout << "CUDA support: not built\n";
#endif
    return 0;
  };
}

KVEVICT_COMMAND("version", "Print the version, commit and build features", setup_version, 1000);

}  // namespace
