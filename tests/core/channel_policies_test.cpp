// policies/field/think.yaml (ThinK: SnapKV token selection, then key-channel pruning; kvpress
// ThinKPress composed after SnapKVPress) on stories260K against independent references: the kept
// tokens equal reference::snapkv's (reference_policies.cpp, from the recorded attention in double),
// the pruned channels of every (layer, KV head) equal reference::think_pruned_channels' (from the
// recorded post-RoPE window queries and the kept entries' recorded keys, in double), and the cache
// really holds zeros there and the recorded keys elsewhere. Keys appended while decoding keep every
// channel (ThinKPress compresses only at prefill).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "decode_spy.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "reference_channel_policies.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

constexpr int kWindow = 32;  // think.yaml's window (SnapKV's and ThinKPress window_size)

class ChannelPolicies : public test::StoriesAttentionTest<kWindow> {
 protected:
  struct Run {
    std::unique_ptr<Decoder> decoder;
    std::unique_ptr<EvictionEngine> engine;
    std::unique_ptr<test::DecodeSpy> spy;
    std::unique_ptr<PolicyProgram> policy;
  };
  // The prompt under think.yaml with a DecodeSpy recording the window rows and each head's keys
  // before the engine acts (at prefill the full prompt: the engine decides after the last layer).
  // kv_type F32 only with the spy (it reads the cache's f32 rows); F16 runs without it.
  static Run run(const std::map<std::string, std::string>& params, const std::string& budget, KvType type = KvType::F32) {
    Run r;
    r.policy = load_policy("think", params);
    r.decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = type});
    r.engine = std::make_unique<EvictionEngine>(*r.policy, model_->config, EngineOptions{Budget::parse(budget), 0});
    if (type == KvType::F32) r.spy = std::make_unique<test::DecodeSpy>(*r.engine, model_->config, kWindow);
    r.decoder->forward(std::span<const int>(tokens_), r.spy ? static_cast<ForwardObserver*>(r.spy.get()) : r.engine.get());
    return r;
  }
  // The recorded key of original position `pos` in the spy's snapshot of (layer, head).
  static const float* recorded_key(const reference::CachedHead& b, int32_t pos, int d) {
    const auto it = std::find(b.pos.begin(), b.pos.end(), pos);
    EXPECT_NE(it, b.pos.end()) << "position " << pos << " was not recorded";
    return b.keys.data() + static_cast<size_t>(it - b.pos.begin()) * d;
  }
};

TEST_F(ChannelPolicies, ThinKZeroesTheReferenceChannelsOfSnapKVsKeptKeys) {
  const ModelConfig& c = model_->config;
  const int d = c.head_dim, G = c.group_size();
  for (int budget : {48, 80}) {
    const std::string what = "think budget " + std::to_string(budget);
    Run r = run({}, std::to_string(budget));
    const EvictionReport& rep = r.engine->report();
    EXPECT_GT(test::expect_same_kept(rep, reference::snapkv(*data_, budget, {kWindow, 5, false}), S(), what), 0);
    const int n = static_cast<int>(0.4 * d);
    ASSERT_GT(n, 0);
    EXPECT_EQ(rep.pruned_key_channels, static_cast<int64_t>(c.n_layers) * c.n_kv_heads * n) << what;
    std::set<std::vector<int>> distinct;
    int on_kept_keys_only = 0;  // heads where the prompt's keys would have pruned other channels
    const KVCache& cache = r.decoder->cache();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const reference::CachedHead& before = r.spy->before(l, h);
        ASSERT_EQ(before.T, S());
        const int T = cache.length(l, h);
        std::vector<float> kept_keys;
        for (int t = 0; t < T; ++t) {
          const float* k = recorded_key(before, cache.positions(l, h)[t], d);
          kept_keys.insert(kept_keys.end(), k, k + d);
        }
        const auto pruned = reference::think_pruned_channels(
            reference::think_channel_scores(r.spy->rows(l), kept_keys, h, G, d), 0.4);
        ASSERT_EQ(static_cast<int>(pruned.size()), n);
        distinct.insert(pruned);
        on_kept_keys_only +=
            reference::think_pruned_channels(reference::think_channel_scores(r.spy->rows(l), before.keys, h, G, d), 0.4) !=
            pruned;
        int nonzero_recorded = 0;
        for (int t = 0; t < T; ++t) {
          const float* got = cache.keys(l, h) + static_cast<size_t>(t) * d;
          const float* want = recorded_key(before, cache.positions(l, h)[t], d);
          for (int ch = 0; ch < d; ++ch) {
            const bool is_pruned = std::binary_search(pruned.begin(), pruned.end(), ch);
            EXPECT_EQ(got[ch], is_pruned ? 0.0f : want[ch]) << what << " layer " << l << " head " << h << " t " << t << " channel " << ch;
            nonzero_recorded += is_pruned && want[ch] != 0.0f;
          }
        }
        EXPECT_GT(nonzero_recorded, 0) << "the zeroed channels held values before: " << what;
      }
    EXPECT_GT(distinct.size(), 1u) << "heads prune different channels: " << what;
    EXPECT_GT(on_kept_keys_only, 0) << "the scores read the kept keys (SnapKV's output), not the prompt's: " << what;
    std::cout << what << ": " << distinct.size() << " distinct pruned sets, " << on_kept_keys_only
              << " heads where the full prompt's keys would prune other channels\n";
    // Decoding: the new keys keep every channel, the pruned entries stay zeroed, nothing is re-pruned.
    const int L = c.n_layers;
    int next = tokens_.back();
    for (int step = 0; step < 3; ++step) {
      const auto& logits = r.decoder->forward(std::span<const int>(&next, 1), r.spy.get());
      next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    int new_nonzero_in_pruned = 0;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<int> zero;  // channels zero in every prefill entry
        for (int ch = 0; ch < d; ++ch) {
          bool all = true;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (cache.positions(l, h)[t] < S()) all = all && cache.keys(l, h)[static_cast<size_t>(t) * d + ch] == 0.0f;
          if (all) zero.push_back(ch);
        }
        EXPECT_EQ(static_cast<int>(zero.size()), n) << what << " layer " << l << " head " << h;
        for (int t = 0; t < cache.length(l, h); ++t)
          if (cache.positions(l, h)[t] >= S())
            for (int ch : zero) new_nonzero_in_pruned += cache.keys(l, h)[static_cast<size_t>(t) * d + ch] != 0.0f;
      }
    EXPECT_GT(new_nonzero_in_pruned, 0) << "decode-time keys are not pruned: " << what;
    EXPECT_EQ(r.engine->report().pruned_key_channels, rep.pruned_key_channels);
  }
}

// ratio 0 (kvpress's default) and --budget full zero nothing; an F16 cache holds exact zeros; the
// report's bytes do not change with the pruned channels (they stay stored).
TEST_F(ChannelPolicies, NoPruningAtRatioZeroOrFullBudgetAndBytesUnchanged) {
  const ModelConfig& c = model_->config;
  for (const auto& [params, budget] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"ratio", "0"}}, "48"}, {{}, "full"}}) {
    Run r = run(params, budget);
    EXPECT_EQ(r.engine->report().pruned_key_channels, 0) << budget;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const reference::CachedHead& before = r.spy->before(l, h);
        const KVCache& cache = r.decoder->cache();
        for (int t = 0; t < cache.length(l, h); ++t)
          for (int ch = 0; ch < c.head_dim; ++ch)
            ASSERT_EQ(cache.keys(l, h)[static_cast<size_t>(t) * c.head_dim + ch],
                      recorded_key(before, cache.positions(l, h)[t], c.head_dim)[ch]);
      }
  }
  Run pruned = run({}, "48", KvType::F16), plain = run({{"ratio", "0"}}, "48", KvType::F16);
  EXPECT_EQ(pruned.engine->report().bytes_kept, plain.engine->report().bytes_kept) << "zeroed channels stay stored";
  const KVCache& cache = pruned.decoder->cache();
  std::vector<float> k(static_cast<size_t>(c.head_dim));
  int zeros = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int t = 0; t < cache.length(l, h); ++t) {
        cache.reconstruct_keys(l, h, t, t + 1, k.data());
        zeros += static_cast<int>(std::count(k.begin(), k.end(), 0.0f));
      }
  EXPECT_GE(zeros, static_cast<int>(0.4 * c.head_dim) * 48 * c.n_layers * c.n_kv_heads);
}

}  // namespace
}  // namespace kvevict
