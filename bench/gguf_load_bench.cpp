// Loading and tokenizing SmolLM2 (GGUF): load_gguf wall time (parse + dequantise 134.5M weights
// to f32), and BPE encode/decode throughput on a long mixed text. Prints figures; not a test.
//   gguf_load_bench [model.gguf]   (default: ${KVEVICT_MODEL_DIR:-~/.cache/kvevict/models}/SmolLM2-...)
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_common.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : kvevict::bench::default_smollm2_path();
  try {
    // Wall time and process CPU time (the latter is what matters on a shared, loaded machine).
    double best_load = 1e30, best_cpu = 1e30;
    std::unique_ptr<kvevict::Model> model;
    for (int rep = 0; rep < 3; ++rep) {
      model.reset();
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      model = kvevict::load_gguf(path);
      best_cpu = std::min(best_cpu, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
      best_load = std::min(best_load, seconds_since(t0));
    }
    std::printf("load_gguf %s: best of 3 = %.3f s wall, %.3f s CPU (%lld parameters)\n", path.c_str(), best_load,
                best_cpu, static_cast<long long>(model->info.n_params));

    const std::string paragraph =
        "The quick brown fox jumps over the lazy dog in 2024, isn't it?  Tabs\tand\nnewlines; "
        "naïve café, 日本語のテキスト, числа 12345 and emoji 🙂🚀. ";
    std::string text;
    while (text.size() < (1u << 20)) text += paragraph;
    const kvevict::Tokenizer& tok = *model->tokenizer;
    double best_encode = 1e30, best_decode = 1e30;
    size_t n_tokens = 0;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      const std::vector<int> ids = tok.encode(text, false);
      best_encode = std::min(best_encode, seconds_since(t0));
      n_tokens = ids.size();
      t0 = std::chrono::steady_clock::now();
      const std::string back = tok.decode(ids);
      best_decode = std::min(best_decode, seconds_since(t0));
      if (back != text) {
        std::fprintf(stderr, "round trip mismatch\n");
        return 1;
      }
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf("encode: %.2f MB -> %zu tokens in %.3f s (%.2f MB/s, %.0f tokens/s)\n", mb, n_tokens, best_encode,
                mb / best_encode, n_tokens / best_encode);
    std::printf("decode: %zu tokens in %.3f s (%.0f tokens/s)\n", n_tokens, best_decode, n_tokens / best_decode);
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
