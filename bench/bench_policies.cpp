// Cost of each built-in policy file applied LIVE inside a real prefill (the engine as the
// decoder's observer, as `kvevict generate --policy` runs it), against the same prefill without a
// policy; and the cache bytes after eviction against the theoretical budget.
//   bench_policies [MODEL] [PROMPT_TOKENS] [BUDGET] [POLICY...]
// defaults: SmolLM2-135M-Instruct Q4_1 from ${KVEVICT_MODEL_DIR:-~/.cache/kvevict/models}, 4096
// tokens, budget 10%, every built-in policy.
// Columns: engine_wall / engine_cpu = time inside the engine's callbacks (wall; process CPU time,
// which on a busy machine is the steadier figure); of_prefill = engine time / plain prefill time
// (CPU); delta_cpu = (CPU of the prefill with the policy - CPU of the plain prefill) / plain, which
// adds the decoder's signal recording (window queries, accumulated attention) and noise.
// Bytes: theoretical = budget tokens x layers x KV heads x 2 x head_dim x 4 (K and V floats);
// kept = the cache's bytes in use (K, V and one int32 position per entry); for SpindleKV the
// codebook-backed size (codes + indices + norms + positions) is reported as well. peak_bytes = the
// largest cache during the prefill (bounded by budget + block for a run.prefill_block policy, which
// is prefilled in blocks as generate and eval prefill it).
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/decode/blas_kernels.h"
#include "core/decode/decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "dsl/policy_loader.h"

using namespace kvevict;

namespace {

double wall() { return bench::wall_seconds(); }
double cpu() { return bench::process_cpu_seconds(); }

// Forwards to the engine and times what happens inside its callbacks.
class TimedObserver : public ForwardObserver {
 public:
  explicit TimedObserver(EvictionEngine& e) : engine_(e) {}
  ObservationRequest request() const override { return engine_.request(); }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    const double w = wall(), c = cpu();
    engine_.after_layer(s, cache);
    wall_s += wall() - w;
    cpu_s += cpu() - c;
  }
  void after_forward(int n, KVCache& cache) override {
    const double w = wall(), c = cpu();
    engine_.after_forward(n, cache);
    wall_s += wall() - w;
    cpu_s += cpu() - c;
  }
  double wall_s = 0, cpu_s = 0;

 private:
  EvictionEngine& engine_;
};

}  // namespace

int main(int argc, char** argv) try {
  kvevict::use_matching_blas_kernels();  // the figures need the CPU's SGEMM kernels
  const std::string path = argc > 1 ? argv[1] : bench::default_smollm2_path();
  const int n = argc > 2 ? std::atoi(argv[2]) : 4096;
  const std::string budget_text = argc > 3 ? argv[3] : "10%";
  std::vector<std::string> names;
  for (int i = 4; i < argc; ++i) names.push_back(argv[i]);
  if (names.empty())
    names = {"full", "random", "streamingllm", "h2o", "tova", "snapkv", "pyramidkv", "adakv", "knorm", "cake", "nacl",
             "spindlekv", "rkv"};
  auto model = load_model(path);
  const ModelConfig& c = model->config;
  std::string text;
  const char* sentences[] = {"Mira kept the lighthouse log in a green notebook with a cracked spine. ",
                             "Each evening she counted the ships, the gulls and the lamps on the far shore. ",
                             "In winter the ferry stopped, so the baker sent bread up the hill by cart. ",
                             "Nobody remembered who had painted the number 7 on the harbour wall. "};
  for (int i = 0; static_cast<int>(model->tokenizer->encode(text, true).size()) < n; ++i) text += sentences[i % 4];
  std::vector<int> tokens = model->tokenizer->encode(text, true);
  tokens.resize(n);
  auto decoder = make_cpu_decoder(*model);

  double w0 = wall(), c0 = cpu();
  decoder->forward(std::span<const int>(tokens));
  const double plain_wall = wall() - w0, plain_cpu = cpu() - c0;
  const Budget budget = Budget::parse(budget_text);
  const int64_t per_head_total = std::llround(budget.tokens_per_head(n) * c.n_layers);
  const double theoretical = static_cast<double>(per_head_total) * c.n_kv_heads * 2.0 * c.head_dim * sizeof(float);
  std::printf("model %s: %d layers, %d KV heads, head_dim %d; prompt %d tokens; budget %s (%.1f tokens per head)\n",
              path.c_str(), c.n_layers, c.n_kv_heads, c.head_dim, n, budget_text.c_str(), budget.tokens_per_head(n));
  std::printf("plain prefill: %.2f s wall, %.2f s CPU\n", plain_wall, plain_cpu);
  std::printf("%-13s %9s %9s %10s %9s %9s %12s %12s %8s %12s\n", "policy", "eng_wall", "eng_cpu", "of_prefill", "delta_cpu",
              "total_cpu", "bytes_kept", "theoretical", "overhead", "peak_bytes");
  for (const std::string& name : names) {
    const auto policy = load_policy(name);
    decoder->reset();
    EvictionEngine engine(*policy, c, {budget, 1});
    TimedObserver timed(engine);
    w0 = wall();
    c0 = cpu();
    prefill_prompt(*decoder, tokens, &engine, &timed);  // in blocks for a run.prefill_block policy
    const double total_cpu = cpu() - c0;
    (void)w0;
    const EvictionReport& r = engine.report();
    const size_t in_use = decoder->cache().bytes_in_use();
    std::printf("%-13s %9.3f %9.3f %9.2f%% %8.1f%% %9.2f %12zu %12.0f %7.2f%% %12zu\n", name.c_str(), timed.wall_s,
                timed.cpu_s, 100.0 * timed.cpu_s / plain_cpu, 100.0 * (total_cpu - plain_cpu) / plain_cpu, total_cpu,
                in_use, theoretical, 100.0 * (static_cast<double>(in_use) / theoretical - 1.0), r.peak_bytes);
    if (policy->description().merge.enabled && policy->description().merge.method == MergeMethod::Codebook) {
      std::printf("%-13s codebook stage %.3f s wall (%.2f%% of prefill wall); %lld key codes, %lld value codes for "
                  "%lld tokens; codebook-backed bytes %zu = %.3f x the float cache after eviction, %.3f x theoretical\n",
                  "", r.codebook_seconds, 100.0 * r.codebook_seconds / plain_wall, static_cast<long long>(r.key_codes),
                  static_cast<long long>(r.value_codes), static_cast<long long>(r.codebook_tokens), r.bytes_codebook,
                  static_cast<double>(r.bytes_codebook) / static_cast<double>(in_use),
                  static_cast<double>(r.bytes_codebook) / theoretical);
    }
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {  // a missing model or a bad policy: say which, no abort
  std::fprintf(stderr, "bench_policies: %s\n", e.what());
  return 1;
}
