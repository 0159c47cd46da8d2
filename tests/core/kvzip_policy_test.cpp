// policies/field/kvzip.yaml (KVzip: A_replay + observe.replay, select.scope model / layer) keeps
// exactly the kept sets of an independent reference on stories260K: the double replay scores of
// reference_replay.h, the max over each KV head's query heads, then the model-wide (or per-layer)
// top-k written here. Also: the recorded-prefill path of the eval sweep (PrefillRecorder::
// record_replay + apply_after_prefill) keeps the same sets as prefill_prompt, and the replay leaves
// the kept entries, the position and the prompt's logits as a plain prefill has them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <tuple>

#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "reference_forward.h"
#include "reference_replay.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

using Scores = std::vector<std::vector<std::vector<double>>>;  // [layer][query head][t]

class KvzipPolicy : public test::StoriesPromptTest {
 protected:
  // kvpress's score of KV head g's entry t: the max over its group's query heads.
  static double group_max(const Scores& ref, int l, int g, int G, int t) {
    double best = ref[l][g * G][t];
    for (int h = g * G + 1; h < (g + 1) * G; ++h) best = std::max(best, ref[l][h][t]);
    return best;
  }
  // One top-k of `keep` over the candidates (l, g, t) of layers [l0, l1), ties to the smaller
  // position, then the lower layer, then the lower head; returns the kept positions per head.
  static reference::KeptSets top_k(const Scores& ref, int G, int n_kv, int l0, int l1, int64_t keep,
                                   reference::KeptSets kept) {
    struct Entry { double score; int t, l, g; };
    std::vector<Entry> all;
    const int S = static_cast<int>(ref[0][0].size());
    for (int l = l0; l < l1; ++l)
      for (int g = 0; g < n_kv; ++g)
        for (int t = 0; t < S; ++t) all.push_back({group_max(ref, l, g, G, t), t, l, g});
    std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) {
      if (a.score != b.score) return a.score > b.score;
      return std::tie(a.t, a.l, a.g) < std::tie(b.t, b.l, b.g);
    });
    for (int64_t i = 0; i < keep && i < static_cast<int64_t>(all.size()); ++i) kept[all[i].l][all[i].g].push_back(all[i].t);
    for (auto& layer : kept)
      for (auto& head : layer) std::sort(head.begin(), head.end());
    return kept;
  }
  // The reference's kept sets for a per-head budget: one pool over the model, or one per layer.
  static reference::KeptSets reference_kept(const Scores& ref, int budget, bool per_layer) {
    const ModelConfig& c = model_->config;
    const int G = c.group_size();
    reference::KeptSets kept(c.n_layers, std::vector<std::vector<int>>(c.n_kv_heads));
    if (!per_layer) return top_k(ref, G, c.n_kv_heads, 0, c.n_layers, int64_t{budget} * c.n_layers * c.n_kv_heads, kept);
    for (int l = 0; l < c.n_layers; ++l) kept = top_k(ref, G, c.n_kv_heads, l, l + 1, int64_t{budget} * c.n_kv_heads, kept);
    return kept;
  }
  static Scores reference_scores(const ReplayOptions& o) {
    return test::reference_replay_scores(*model_, tokens_, test::kvpress_test_prompt(*model_->tokenizer), o);
  }
  static std::unique_ptr<Decoder> decoder() { return make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32}); }
};

TEST_F(KvzipPolicy, KeepsTheReferenceModelWideTopK) {
  const Scores one_chunk = reference_scores({});  // kvpress's defaults: one 2048-token chunk
  const Scores chunks = reference_scores({.chunk = 48, .previous_tail = 8, .n_sink = 4});
  ASSERT_NE(S() % 48, 0) << "the last chunk should be partial";
  for (int budget : {S() / 4, S() / 2}) {
    const std::string b = std::to_string(budget);
    EXPECT_GT(test::expect_same_kept(test::prefill_report(*model_, tokens_, "kvzip", {}, b),
                                     reference_kept(one_chunk, budget, false), S(), "kvzip " + b), 0);
    EXPECT_GT(test::expect_same_kept(test::prefill_report(*model_, tokens_, "kvzip", {{"chunk", "48"}}, b),
                                     reference_kept(chunks, budget, false), S(), "kvzip chunk 48 " + b), 0);
    EXPECT_GT(test::expect_same_kept(test::prefill_report(*model_, tokens_, "kvzip", {{"scope", "layer"}}, b),
                                     reference_kept(one_chunk, budget, true), S(), "kvzip layer " + b), 0);
  }
  // The model-wide pool is not uniform: some heads keep more than the per-head budget.
  const EvictionReport r = test::prefill_report(*model_, tokens_, "kvzip", {}, std::to_string(S() / 4));
  int most = 0;
  for (const auto& layer : r.layers)
    for (const HeadReport& h : layer) most = std::max(most, h.kept);
  EXPECT_GT(most, S() / 4);
  EXPECT_GT(r.replay_seconds, 0.0);
}

// KVzip+ (normalise true) with the column factor out_norm multiplied in by the program: the policy
// path reads out_norm after the prompt's forward (held per layer while the prefill waits).
TEST_F(KvzipPolicy, KvzipPlusMatchesTheReference) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvevict_kvzip_plus_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "kvzip_plus.yaml").string();
  std::ofstream(path) << "name: kvzip_plus\nabout: KVzip+\nobserve:\n  replay: {chunk: 64, normalise: true}\n"
                         "select: {scope: model}\nscore: |\n  score[t] = max(h: A_replay[h, t] * out_norm[h, t])\n";
  Scores ref = reference_scores({.chunk = 64, .previous_tail = 8, .n_sink = 4, .hidden_normalised = true});
  // The column factor ||W_o,h v_t|| from the double reference forward's values and the weights.
  const ModelConfig& c = model_->config;
  const test::ReferenceResult fwd = test::reference_forward(*model_, tokens_);
  const int G = c.group_size(), hd = c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::vector<float>& wo = model_->weights.layers[l].wo;  // [dim][n_heads * head_dim]
    for (int h = 0; h < c.n_heads; ++h)
      for (int t = 0; t < S(); ++t) {
        double ss = 0;
        for (int o = 0; o < c.dim; ++o) {
          double y = 0;
          for (int i = 0; i < hd; ++i)
            y += double(wo[static_cast<size_t>(o) * c.n_heads * hd + h * hd + i]) * fwd.values[l][t][(h / G) * hd + i];
          ss += y * y;
        }
        ref[l][h][t] *= std::sqrt(ss);
      }
  }
  const int budget = S() / 3;
  const EvictionReport got = test::prefill_report(*model_, tokens_, path, {}, std::to_string(budget));
  EXPECT_GT(test::expect_same_kept(got, reference_kept(ref, budget, false), S(), "kvzip+"), 0);
  std::filesystem::remove_all(dir);
}

// The eval sweep's path: one recorded prefill, the replay recorded once, many restores.
TEST_F(KvzipPolicy, RecordedPrefillKeepsTheSameSetsAsTheDirectPath) {
  for (const std::map<std::string, std::string>& params :
       std::vector<std::map<std::string, std::string>>{{}, {{"chunk", "40"}, {"n_sink", "2"}}, {{"scope", "layer"}}}) {
    const auto policy = load_policy("kvzip", params);
    auto dec = decoder();
    PrefillRecorder recorder(recorded_window_for(*policy, S()), false);
    dec->forward(tokens_, &recorder);
    const KVCache before = dec->cache();
    recorder.record_replay(*dec, policy->description().observe.replay);
    recorder.record_replay(*dec, policy->description().observe.replay);  // the second is a no-op
    EXPECT_TRUE(dec->cache().bytes_in_use() == before.bytes_in_use() && dec->position() == S());
    for (int l = 0; l < before.n_layers(); ++l)
      for (int g = 0; g < before.n_kv_heads(); ++g)
        ASSERT_EQ(std::memcmp(dec->cache().keys(l, g), before.keys(l, g), sizeof(float) * S() * before.head_dim()), 0);
    for (int budget : {S() / 4, S() / 2}) {
      KVCache cache = before;
      EvictionEngine engine(*policy, model_->config, {Budget::parse(std::to_string(budget)), 0});
      engine.apply_after_prefill(recorder, cache);
      const EvictionReport direct = test::prefill_report(*model_, tokens_, "kvzip", params, std::to_string(budget));
      reference::KeptSets want(direct.layers.size());
      for (size_t l = 0; l < direct.layers.size(); ++l)
        for (const HeadReport& h : direct.layers[l]) want[l].emplace_back(h.kept_positions.begin(), h.kept_positions.end());
      EXPECT_GT(test::expect_same_kept(engine.report(), want, S(), "recorded kvzip " + std::to_string(budget)), 0);
    }
    // A recorder without the replay is refused, not silently scored.
    PrefillRecorder bare(0, false);
    auto other = decoder();
    other->forward(tokens_, &bare);
    EvictionEngine engine(*policy, model_->config, {Budget::parse("10"), 0});
    EXPECT_THROW(engine.apply_after_prefill(bare, other->cache()), std::invalid_argument);
  }
}

// Through prefill_prompt the cache ends as the prefill left it, minus the evicted entries: the kept
// entries are bit-identical to a plain prefill's, the position is S and the logits are the prompt's.
TEST_F(KvzipPolicy, TheReplayLeavesTheCacheAsThePrefillLeftIt) {
  const auto policy = load_policy("kvzip", {{"chunk", "50"}});
  auto plain = decoder();
  const std::vector<float> plain_logits = plain->forward(tokens_);
  auto dec = decoder();
  EvictionEngine engine(*policy, model_->config, {Budget::parse(std::to_string(S() / 3)), 0});
  const std::vector<float> logits = prefill_prompt(*dec, tokens_, &engine, &engine);
  EXPECT_EQ(logits, plain_logits);
  EXPECT_EQ(dec->position(), S());
  const KVCache& full = plain->cache();
  const KVCache& kept = dec->cache();
  const int hd = full.head_dim();
  int evicted = 0;
  for (int l = 0; l < full.n_layers(); ++l)
    for (int g = 0; g < full.n_kv_heads(); ++g) {
      evicted += kept.length(l, g) < S();
      for (int i = 0; i < kept.length(l, g); ++i) {
        const int p = kept.positions(l, g)[i];
        ASSERT_EQ(std::memcmp(kept.keys(l, g) + static_cast<size_t>(i) * hd,
                              full.keys(l, g) + static_cast<size_t>(p) * hd, hd * sizeof(float)), 0);
        ASSERT_EQ(std::memcmp(kept.values(l, g) + static_cast<size_t>(i) * hd,
                              full.values(l, g) + static_cast<size_t>(p) * hd, hd * sizeof(float)), 0);
      }
    }
  EXPECT_GT(evicted, 0);
  // Decoding goes on from the evicted cache (the engine no longer waits).
  const std::vector<int> next = {tokens_.back()};
  EXPECT_NO_THROW(dec->forward(next, &engine));
}

TEST_F(KvzipPolicy, WithinTheBudgetNothingIsReplayed) {
  const EvictionReport r = test::prefill_report(*model_, tokens_, "kvzip", {}, "full");
  EXPECT_EQ(r.replay_seconds, 0.0);
  EXPECT_FALSE(r.prefill_evicted);
  for (const auto& layer : r.layers)
    for (const HeadReport& h : layer) EXPECT_EQ(h.kept, S());
}

// A prompt that skips prefill_prompt never gets its replay: the next forward call says so.
TEST_F(KvzipPolicy, AForwardCallWhileThePrefillWaitsIsAUsageError) {
  const auto policy = load_policy("kvzip");
  auto dec = decoder();
  EvictionEngine engine(*policy, model_->config, {Budget::parse("10"), 0});
  dec->forward(tokens_, &engine);
  EXPECT_TRUE(engine.awaits_replay());
  const std::vector<int> next = {tokens_.back()};
  EXPECT_THROW(dec->forward(next, &engine), UsageError);
}

}  // namespace
}  // namespace kvevict
