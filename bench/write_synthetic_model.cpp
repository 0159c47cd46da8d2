// write_synthetic_model: writes a synthetic model (core/model/synthetic_model.h) as a Hugging Face
// folder (core/model/synthetic_folder.h), for benchmarks that load weights from a file as a user's
// checkpoint loads: bench_gpu_decode --model DIR records the host peak RSS beside the weight file's
// size (issue 10: weights go to the device with no f32 host copy, host peak RSS at most about 1.2x
// the file). scripts/device-check.sh writes synthetic:llama3.1-8b (16 GB of F16) this way on the
// accelerator machine, which holds no real 8B checkpoint.
//   write_synthetic_model synthetic:NAME[:SEED] DIR [--bf16]
// Exit status: 0 written, 2 bad arguments, 1 a failed write.
#include <chrono>
#include <cstdio>
#include <string>

#include "core/model/synthetic_folder.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"

int main(int argc, char** argv) {
  using namespace kvevict;
  if (argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "--bf16")) {
    std::fprintf(stderr, "usage: write_synthetic_model synthetic:NAME[:SEED] DIR [--bf16]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    const std::string spec = argv[1];
    const SyntheticSpec parsed = parse_synthetic_spec(spec);  // no weights drawn here
    const uint64_t bytes = write_synthetic_hf_folder(
        parsed.config, parsed.seed, argv[2], argc == 4 ? SyntheticFolderType::BF16 : SyntheticFolderType::F16);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("write_synthetic_model: %s -> %s (model.safetensors %.1f MiB) in %.1f s\n", spec.c_str(), argv[2],
                static_cast<double>(bytes) / (1 << 20), seconds);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "write_synthetic_model: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_synthetic_model: %s\n", e.what());
    return 1;
  }
}
