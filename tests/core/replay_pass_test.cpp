// KVzip's replay pass (core/engine/replay_pass.h) against an independent double reference on
// stories260K (reference_replay.h: the naive double forward over context ++ replay, each replay
// query's full softmax restricted to kvpress's subset and renormalised).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/replay_pass.h"
#include "reference_replay.h"
#include "stories_prompt_test.h"

namespace kvevict::test {
namespace {

class ReplayPassTest : public StoriesPromptTest {
 protected:
  static ReplayPrompt kvpress_prompt() { return kvpress_test_prompt(*model_->tokenizer); }
  static std::unique_ptr<Decoder> prefilled(KvType type = KvType::F32) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = type});
    decoder->forward(tokens_);
    return decoder;
  }
};

// kvpress's default selection (layerwise = false): one top-k over every (layer, head, entry),
// keeping total - floor(total * ratio); returns the kept flat indices, sorted.
template <class Score>
std::vector<int> global_kept(int total, double ratio, Score score) {
  std::vector<int> order(total);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score(a) > score(b); });
  order.resize(static_cast<size_t>(total - static_cast<int>(total * ratio)));
  std::sort(order.begin(), order.end());
  return order;
}

void expect_matches_reference(const Model& model, const std::vector<int>& context, const ReplayPrompt& prompt,
                              const ReplayOptions& o, const ReplayScores& got) {
  const auto ref = reference_replay_scores(model, context, prompt, o);
  const int L = got.length, n_kv = got.n_kv_heads, G = got.n_heads / n_kv;
  ASSERT_EQ(got.n_heads, model.config.n_heads);
  double worst = 0, largest = 0;
  for (int l = 0; l < got.n_layers; ++l) {
    for (int h = 0; h < got.n_heads; ++h) {
      for (int t = 0; t < L; ++t) {
        EXPECT_NEAR(got.at(l, h, t), ref[l][h][t], 2e-5 * (o.hidden_normalised ? 0.1 : 1.0) + 1e-4 * ref[l][h][t])
            << "layer " << l << " head " << h << " t " << t;
        worst = std::max(worst, std::abs(got.at(l, h, t) - ref[l][h][t]));
        largest = std::max(largest, ref[l][h][t]);
      }
    }
  }
  ASSERT_GT(largest, 0.0);
  // kvpress's score of a KV head's entry: the max over the group's query heads.
  const int total = got.n_layers * n_kv * L;
  auto ref_at = [&](int i) {
    const int l = i / (n_kv * L), g = (i / L) % n_kv, t = i % L;
    double best = 0;
    for (int h = g * G; h < (g + 1) * G; ++h) best = std::max(best, ref[l][h][t]);
    return best;
  };
  auto got_at = [&](int i) { return got.group_max(i / (n_kv * L), (i / L) % n_kv, i % L); };
  for (double ratio : {0.25, 0.5, 0.75}) {
    EXPECT_EQ(global_kept(total, ratio, got_at), global_kept(total, ratio, ref_at))
        << "ratio " << ratio << " (worst score error " << worst << ")";
  }
}

TEST_F(ReplayPassTest, OneChunkMatchesDoubleReference) {
  auto decoder = prefilled();
  const ReplayPrompt prompt = kvpress_prompt();
  const ReplayOptions o{};  // kvpress's defaults: one 2048-token chunk covers the prompt
  ASSERT_EQ(replay_chunk_count(S(), o), 1);
  expect_matches_reference(*model_, tokens_, prompt, o, replay_scores(*decoder, tokens_, prompt, o));
}

TEST_F(ReplayPassTest, SeveralChunksMatchDoubleReference) {
  auto decoder = prefilled();
  const ReplayPrompt prompt = kvpress_prompt();
  const ReplayOptions o{.chunk = 48, .previous_tail = 8, .n_sink = 4, .context_start = 0};
  ASSERT_GE(replay_chunk_count(S(), o), 3);
  ASSERT_NE(S() % o.chunk, 0) << "the last chunk should be partial";
  expect_matches_reference(*model_, tokens_, prompt, o, replay_scores(*decoder, tokens_, prompt, o));
}

TEST_F(ReplayPassTest, ChatPrefixAndSinksMatchDoubleReference) {
  auto decoder = prefilled();
  const ReplayPrompt prompt = kvpress_prompt();
  const ReplayOptions o{.chunk = 40, .previous_tail = 5, .n_sink = 3, .context_start = 7};
  const ReplayScores got = replay_scores(*decoder, tokens_, prompt, o);
  expect_matches_reference(*model_, tokens_, prompt, o, got);
  // The sinks keep 1 and the rest of the prefix 0 (kvpress's initialisation, never replayed).
  for (int l = 0; l < got.n_layers; ++l) {
    for (int h = 0; h < got.n_heads; ++h) {
      for (int t = 0; t < 7; ++t) EXPECT_EQ(got.at(l, h, t), t < 3 ? 1.0f : 0.0f);
    }
  }
}

// KVzip+'s row factor: each replay query's attention divided by its attention input's norm.
TEST_F(ReplayPassTest, HiddenNormalisedScoresMatchDoubleReference) {
  auto decoder = prefilled();
  const ReplayPrompt prompt = kvpress_prompt();
  const ReplayOptions o{.chunk = 64, .previous_tail = 8, .n_sink = 4, .context_start = 0, .hidden_normalised = true};
  expect_matches_reference(*model_, tokens_, prompt, o, replay_scores(*decoder, tokens_, prompt, o));
}

TEST_F(ReplayPassTest, ReplayTokensFollowKvpressPrepare) {
  const ReplayPrompt p{{1, 2}, {3}, {4}};
  const std::vector<int> ctx = {10, 11, 12, 13, 14, 15, 16};
  const ReplayOptions o{.chunk = 3, .previous_tail = 2, .n_sink = 1, .context_start = 1};
  EXPECT_EQ(replay_chunk_count(7, o), 2);
  EXPECT_EQ(replay_tokens(ctx, p, o, 0), (std::vector<int>{1, 2, 4, 11, 12, 13}));
  EXPECT_EQ(replay_tokens(ctx, p, o, 1), (std::vector<int>{3, 12, 13, 4, 14, 15, 16}));
  EXPECT_EQ(replay_chunk_count(1, o), 0);
}

// The cache ends exactly as before (entries, positions, bytes, position) and decodes the same.
TEST_F(ReplayPassTest, CacheIsRestoredExactly) {
  for (KvType type : {KvType::F32, KvType::F16}) {
    auto decoder = prefilled(type);
    const KVCache before = decoder->cache();
    (void)replay_scores(*decoder, tokens_, kvpress_prompt(), {.chunk = 50});
    const KVCache& after = decoder->cache();
    ASSERT_EQ(decoder->position(), S());
    for (int l = 0; l < before.n_layers(); ++l) {
      for (int g = 0; g < before.n_kv_heads(); ++g) {
        ASSERT_EQ(after.length(l, g), S());
        std::vector<float> kb(static_cast<size_t>(S()) * before.head_dim()), ka(kb.size()), vb(kb.size()), va(kb.size());
        before.reconstruct_keys(l, g, 0, S(), kb.data());
        after.reconstruct_keys(l, g, 0, S(), ka.data());
        before.reconstruct_values(l, g, 0, S(), vb.data());
        after.reconstruct_values(l, g, 0, S(), va.data());
        EXPECT_EQ(std::memcmp(kb.data(), ka.data(), kb.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(vb.data(), va.data(), vb.size() * sizeof(float)), 0);
        EXPECT_TRUE(std::equal(before.positions(l, g), before.positions(l, g) + S(), after.positions(l, g)));
      }
    }
    auto fresh = prefilled(type);
    const std::vector<int> next = {tokens_.back()};
    EXPECT_EQ(decoder->forward(next), fresh->forward(next));
  }
}

TEST_F(ReplayPassTest, RejectsBadOptionsAndEvictedCaches) {
  const ReplayPrompt prompt = kvpress_prompt();
  auto decoder = prefilled();
  EXPECT_THROW(replay_scores(*decoder, tokens_, prompt, {.chunk = 0}), std::invalid_argument);
  EXPECT_THROW(replay_scores(*decoder, tokens_, prompt, {.chunk = kMaxReplayChunk + 1}), std::invalid_argument);
  EXPECT_THROW(replay_scores(*decoder, tokens_, prompt, {.chunk = 4, .previous_tail = 5}), std::invalid_argument);
  EXPECT_THROW(replay_scores(*decoder, tokens_, prompt, {.n_sink = -1}), std::invalid_argument);
  EXPECT_THROW(replay_scores(*decoder, tokens_, prompt, {.context_start = S() + 1}), std::invalid_argument);
  ReplayPrompt huge = prompt;
  huge.suffix.assign(kMaxReplayPromptTokens + 1, 1);
  EXPECT_THROW(replay_scores(*decoder, tokens_, huge), std::invalid_argument);
  const std::vector<int> shorter(tokens_.begin(), tokens_.end() - 1);
  EXPECT_THROW(replay_scores(*decoder, shorter, prompt), std::invalid_argument);
  std::vector<int> first(static_cast<size_t>(S() - 1));
  std::iota(first.begin(), first.end(), 0);
  decoder->cache().keep(0, 0, first);  // one head evicted: cache index no longer = position
  EXPECT_THROW(replay_scores(*decoder, tokens_, prompt), std::invalid_argument);
}

}  // namespace
}  // namespace kvevict::test
