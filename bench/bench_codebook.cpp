// SpindleKV's codebook-backed cache against the same eviction stored densely: measured compression
// ratio (the cache's own bytes_in_use) and decode speed with on-the-fly reconstruction.
//   bench_codebook [MODEL] [PROMPT_TOKENS] [BUDGET] [DECODE_TOKENS] [THREADS]
// defaults: the SmolLM2 GGUF in ~/.cache/kvevict/models, 1024 tokens, budget 40%, 64 tokens, 0 (OpenMP default).
// Both runs use the spindlekv policy file; the dense one sets codebook=false (same kept tokens).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "dsl/policy_loader.h"

using namespace kvevict;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Run {
  double prefill_s = 0, decode_s = 0;
  size_t bytes_before = 0, bytes_after_prefill = 0, bytes_end = 0;
  int64_t entries = 0, key_codes = 0, value_codes = 0;
  double codebook_s = 0;
  std::vector<int> generated;
};

Run run(const Model& model, const std::vector<int>& prompt, const std::string& budget, int decode_tokens, int threads,
        bool codebook) {
  const auto policy = load_policy("spindlekv", {{"codebook", codebook ? "true" : "false"}});
  auto decoder = make_cpu_decoder(model, {.threads = threads});
  EvictionEngine engine(*policy, model.config, {Budget::parse(budget), 0});
  Run r;
  double t0 = now();
  std::vector<float> logits = decoder->forward(std::span<const int>(prompt), &engine);
  r.prefill_s = now() - t0;
  const EvictionReport& rep = engine.report();
  r.bytes_before = codebook ? rep.bytes_before_codebook : decoder->cache().bytes_in_use();
  r.bytes_after_prefill = decoder->cache().bytes_in_use();
  r.entries = decoder->cache().total_entries();
  r.key_codes = rep.key_codes;
  r.value_codes = rep.value_codes;
  r.codebook_s = rep.codebook_seconds;
  t0 = now();
  for (int i = 0; i < decode_tokens; ++i) {
    const int token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.generated.push_back(token);
    logits = decoder->forward(std::span<const int>(&token, 1), &engine);
  }
  r.decode_s = now() - t0;
  r.bytes_end = decoder->cache().bytes_in_use();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string path = argc > 1 && *argv[1] ? argv[1] : bench::default_smollm2_path();
  const int n = argc > 2 ? std::atoi(argv[2]) : 1024;
  const std::string budget = argc > 3 ? argv[3] : "40%";
  const int decode_tokens = argc > 4 ? std::atoi(argv[4]) : 64;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  auto model = load_model(path);
  const ModelConfig& c = model->config;
  std::string text;
  while (static_cast<int>(model->tokenizer->encode(text, true).size()) < n)
    text += "Once upon a time a little fox lived near the river. Every morning she ran to the old bridge, "
            "counted the boats, and told the heron what she had seen. One day the river was empty. ";
  std::vector<int> prompt = model->tokenizer->encode(text, true);
  prompt.resize(n);
  std::printf("model %s: %d layers, %d KV heads, head_dim %d; prompt %d tokens; budget %s; %d decode tokens\n",
              path.c_str(), c.n_layers, c.n_kv_heads, c.head_dim, n, budget.c_str(), decode_tokens);
  const Run dense = run(*model, prompt, budget, decode_tokens, threads, false);
  const Run coded = run(*model, prompt, budget, decode_tokens, threads, true);
  const size_t full = static_cast<size_t>(n) * c.n_layers * c.n_kv_heads * (2 * c.head_dim * sizeof(float) + sizeof(int32_t));
  std::printf("full cache (no eviction)      %12zu bytes\n", full);
  std::printf("evicted, dense                %12zu bytes  (%lld entries, %.3f of full)\n", dense.bytes_after_prefill,
              static_cast<long long>(dense.entries), static_cast<double>(dense.bytes_after_prefill) / full);
  std::printf("evicted, codebook             %12zu bytes  (key codes %lld, value codes %lld for %lld entries)\n",
              coded.bytes_after_prefill, static_cast<long long>(coded.key_codes),
              static_cast<long long>(coded.value_codes), static_cast<long long>(coded.entries));
  std::printf("codebook / evicted dense      %12.3f   (measured, after prefill; codebook built in %.2f s)\n",
              static_cast<double>(coded.bytes_after_prefill) / coded.bytes_before, coded.codebook_s);
  std::printf("codebook / full               %12.3f\n", static_cast<double>(coded.bytes_after_prefill) / full);
  std::printf("after %d decode tokens: dense %zu bytes, codebook %zu bytes (ratio %.3f)\n", decode_tokens,
              dense.bytes_end, coded.bytes_end, static_cast<double>(coded.bytes_end) / dense.bytes_end);
  std::printf("decode: dense %.2f tok/s, codebook %.2f tok/s (%.1f%% of dense)\n", decode_tokens / dense.decode_s,
              decode_tokens / coded.decode_s, 100.0 * dense.decode_s / coded.decode_s);
  int same = 0;
  while (same < decode_tokens && dense.generated[same] == coded.generated[same]) ++same;
  std::printf("greedy tokens identical to the dense run: first %d of %d\n", same, decode_tokens);
  return 0;
}
