// Cost of applying each eviction policy after one prefill, as a fraction of the prefill time, and
// cache bytes after eviction against the theoretical budget, for every built-in policy file compiled
// by the DSL (defaults). The decision is replayed from a PrefillRecorder on a copy of the full cache,
// as the eval sweep does; CAKE with cascading=true also runs live inside a prefill.
//   engine_overhead [MODEL] [PROMPT_TOKENS] [BUDGET] [POLICY,POLICY,...]
// (a policy list runs only those and skips the live cascading prefill)
// defaults: the SmolLM2 GGUF in ~/.cache/kvevict/models, 4096 tokens, budget 10%.
#include <chrono>
#include <cmath>
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

// CAKE with cascading=true run live inside a prefill of `tokens`: the engine's time against the
// plain prefill's, and its peak bytes against the final and the full cache's.
void cake_cascading_live(Decoder& decoder, const ModelConfig& c, const std::vector<int>& tokens, const Budget& budget,
                         double prefill_plain) {
  decoder.reset();
  const auto cascade = load_policy("cake", {{"cascading", "true"}});
  EvictionEngine engine(*cascade, c, {budget, 0});
  const double t0 = now();
  decoder.forward(std::span<const int>(tokens), &engine);
  const double total = now() - t0;
  const EvictionReport& r = engine.report();
  std::printf("cake cascading live: prefill+engine %.3f s, engine %.4f s (%.2f%% of plain prefill); peak %zu bytes = "
              "%.3fx final %zu (one-shot peak = full %zu)\n",
              total, r.seconds, 100.0 * r.seconds / prefill_plain, r.peak_bytes,
              static_cast<double>(r.peak_bytes) / r.bytes_kept, r.bytes_kept, r.bytes_full);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows line by line when redirected
  const std::string path = argc > 1 ? argv[1] : bench::default_smollm2_path();
  const int n = argc > 2 ? std::atoi(argv[2]) : 4096;
  const std::string budget_text = argc > 3 ? argv[3] : "10%";
  auto model = load_model(path);
  const ModelConfig& c = model->config;
  std::string text;
  while (static_cast<int>(model->tokenizer->encode(text, true).size()) < n)
    text += "The quick brown fox jumps over the lazy dog while the children count the red boats in the harbour. ";
  std::vector<int> tokens = model->tokenizer->encode(text, true);
  tokens.resize(n);
  auto decoder = make_cpu_decoder(*model);

  double t0 = now();
  decoder->forward(std::span<const int>(tokens));
  const double prefill_plain = now() - t0;
  decoder->reset();
  // 256 window rows cover every built-in default up to NACL's 1% proxy share at 25K tokens.
  PrefillRecorder rec(256, true);
  t0 = now();
  decoder->forward(std::span<const int>(tokens), &rec);
  const double prefill_recorded = now() - t0;
  const KVCache full = decoder->cache();
  std::printf("model %s: %d layers, %d KV heads, head_dim %d; prompt %d tokens; budget %s\n", path.c_str(), c.n_layers,
              c.n_kv_heads, c.head_dim, n, budget_text.c_str());
  std::printf("prefill %.3f s (plain), %.3f s (recording 256 window queries + accumulated attention)\n", prefill_plain,
              prefill_recorded);
  std::printf("%-18s %10s %10s %14s %14s %9s\n", "policy", "apply_s", "of_prefill", "bytes_kept", "bytes_budget",
              "overhead");

  const Budget budget = Budget::parse(budget_text);
  const int64_t per_head_total = std::llround(budget.tokens_per_head(n) * c.n_layers);
  const size_t theoretical = static_cast<size_t>(per_head_total) * c.n_kv_heads * (2 * c.head_dim * sizeof(float) + sizeof(int32_t));
  // The built-in policy files, compiled by the DSL, with their defaults.
  const std::string only = argc > 4 ? "," + std::string(argv[4]) + "," : "";
  for (const std::string name : {"full", "random", "streamingllm", "h2o", "tova", "snapkv", "pyramidkv", "adakv",
                                 "knorm", "cake", "nacl", "spindlekv"}) {
    if (!only.empty() && only.find("," + name + ",") == std::string::npos) continue;
    std::unique_ptr<PolicyProgram> policy;
    try {
      policy = load_policy(name);
    } catch (const std::exception& e) {
      std::printf("%-18s cannot load: %s\n", name.c_str(), e.what());
      continue;
    }
    KVCache cache = full;
    EvictionEngine engine(*policy, c, {budget, 1});
    t0 = now();
    try {
      engine.apply_after_prefill(rec, cache);
    } catch (const std::exception& e) {
      std::printf("%-18s failed: %s\n", name.c_str(), e.what());
      continue;
    }
    const double s = now() - t0;
    const EvictionReport& r = engine.report();
    const bool merged = policy->description().merge.enabled && policy->description().merge.method == MergeMethod::Codebook;
    const size_t kept = merged ? r.bytes_codebook : r.bytes_kept;
    std::printf("%-18s %10.4f %9.2f%% %14zu %14zu %8.2f%%", name.c_str(), s, 100.0 * s / prefill_plain, kept,
                theoretical, 100.0 * (static_cast<double>(kept) / theoretical - 1.0));
    if (merged)
      std::printf("  (codebook %.3f s of it; keys %lld codes, values %lld codes for %lld tokens; codebook bytes / "
                  "evicted float bytes %.3f)",
                  r.codebook_seconds, static_cast<long long>(r.key_codes), static_cast<long long>(r.value_codes),
                  static_cast<long long>(r.codebook_tokens),
                  static_cast<double>(r.bytes_codebook) / static_cast<double>(r.bytes_before_codebook));
    std::printf("\n");
  }
  // CAKE cascading live: engine time inside a real prefill, and peak bytes.
  if (only.empty()) cake_cascading_live(*decoder, c, tokens, budget, prefill_plain);
  return 0;
}
