// Attention over a compacted cache equals attention over the full cache restricted to the kept
// tokens (issue 2 §6), checked through the decoder against the naive reference; and the signals an
// observer receives (window queries, accumulated attention) match the reference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/decode/decoder.h"
#include "core/model/synthetic_model.h"
#include "reference_forward.h"

namespace kvevict {
namespace {

ModelConfig eviction_config() {
  ModelConfig c;
  c.name = "eviction-test";
  c.n_layers = 3;
  c.dim = 48;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 10;
  c.hidden_dim = 64;
  c.vocab_size = 300;
  c.context_length = 256;
  return c;
}

std::vector<int> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(n);
  for (int& v : t) v = static_cast<int>(rng() % 300);
  return t;
}

TEST(EvictionAttention, CompactedCacheEqualsRestrictedAttention) {
  const ModelConfig c = eviction_config();
  const auto model = make_random_model(c, 9);
  constexpr int kPrompt = 40, kDecode = 3;
  const auto tokens = random_tokens(kPrompt + kDecode, 4);

  // A different random kept set per (layer, KV head), given in shuffled order.
  std::mt19937 rng(12);
  std::vector<std::vector<std::set<int>>> kept(c.n_layers, std::vector<std::set<int>>(c.n_kv_heads));
  auto decoder = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  auto block_decoder = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});  // continues with one multi-token block
  decoder->forward(std::span<const int>(tokens.data(), kPrompt));
  block_decoder->forward(std::span<const int>(tokens.data(), kPrompt));
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_kv_heads; ++h) {
      std::vector<int> all(kPrompt);
      for (int i = 0; i < kPrompt; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      const int keep_count = 5 + static_cast<int>(rng() % 20);
      std::vector<int> keep(all.begin(), all.begin() + keep_count);
      kept[l][h] = std::set<int>(keep.begin(), keep.end());
      decoder->cache().keep(l, h, keep);
      block_decoder->cache().keep(l, h, keep);
      ASSERT_EQ(decoder->cache().length(l, h), keep_count);
    }
  }

  // The prompt's own tokens were computed before eviction; decoded tokens see only kept + new ones.
  const auto ref = test::reference_forward(*model, tokens, [&](int l, int h, int q, int k) {
    return q < kPrompt || k >= kPrompt || kept[l][h].count(k) > 0;
  });
  const auto unrestricted = test::reference_forward(*model, tokens);
  for (int t = kPrompt; t < kPrompt + kDecode; ++t) {
    const auto& logits = decoder->forward(std::span<const int>(&tokens[t], 1));
    double worst = 0, eviction_effect = 0;
    for (int v = 0; v < c.vocab_size; ++v) {
      worst = std::max(worst, std::abs(logits[v] - ref.logits[t][v]));
      eviction_effect = std::max(eviction_effect, std::abs(ref.logits[t][v] - unrestricted.logits[t][v]));
    }
    EXPECT_LT(worst, 1e-4) << "decoded token " << t;
    EXPECT_GT(eviction_effect, 1e-2) << "the kept sets should change the logits, or this test proves nothing";
  }
  // The same continuation as one block over the ragged, compacted cache.
  std::vector<float> all;
  block_decoder->forward(std::span<const int>(tokens.data() + kPrompt, kDecode), nullptr, &all);
  for (int t = kPrompt; t < kPrompt + kDecode; ++t) {
    for (int v = 0; v < c.vocab_size; ++v) {
      ASSERT_NEAR(all[size_t(t - kPrompt) * c.vocab_size + v], ref.logits[t][v], 1e-4) << "block token " << t;
    }
  }
}

// Records what the decoder reports after each layer.
class Recorder : public ForwardObserver {
 public:
  explicit Recorder(ObservationRequest r) : request_(r) {}
  ObservationRequest request() const override { return request_; }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    EXPECT_EQ(s.layer, static_cast<int>(layers.size()));
    layers.push_back({s.window, std::vector<float>(s.window_queries.begin(), s.window_queries.end()),
                      s.accumulated_attention ? *s.accumulated_attention : std::vector<std::vector<float>>{},
                      cache.length(s.layer, 0), s.first_position, s.n_tokens});
  }
  void after_forward(int n, KVCache&) override { forwards.push_back(n); }
  struct Layer {
    int window;
    std::vector<float> queries;
    std::vector<std::vector<float>> columns;
    int cache_length, first_position, n_tokens;
  };
  std::vector<Layer> layers;
  std::vector<int> forwards;

 private:
  ObservationRequest request_;
};

void check_observer_signals(const ModelConfig& c, const int kPrompt) {
  const auto model = make_random_model(c, 21);
  const auto tokens = random_tokens(kPrompt + 1, 8);
  const auto ref = test::reference_forward(*model, tokens);
  auto decoder = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});

  Recorder prefill({.window = 8, .accumulated_attention = true});
  decoder->forward(std::span<const int>(tokens.data(), kPrompt), &prefill);
  ASSERT_EQ(prefill.layers.size(), static_cast<size_t>(c.n_layers));
  EXPECT_EQ(prefill.forwards, std::vector<int>{kPrompt});
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& rec = prefill.layers[l];
    EXPECT_EQ(rec.first_position, 0);
    EXPECT_EQ(rec.n_tokens, kPrompt);
    EXPECT_EQ(rec.cache_length, kPrompt);
    ASSERT_EQ(rec.window, 8);
    ASSERT_EQ(rec.queries.size(), 8u * c.q_dim());
    for (int w = 0; w < 8; ++w) {
      for (int i = 0; i < c.q_dim(); ++i) {
        ASSERT_NEAR(rec.queries[w * c.q_dim() + i], ref.queries[l][kPrompt - 8 + w][i], 1e-4) << "layer " << l;
      }
    }
    ASSERT_EQ(rec.columns.size(), static_cast<size_t>(c.n_heads));
    for (int h = 0; h < c.n_heads; ++h) {
      ASSERT_EQ(rec.columns[h].size(), static_cast<size_t>(kPrompt));
      double total = 0;
      for (int k = 0; k < kPrompt; ++k) {
        double want = 0;
        for (int q = 0; q < kPrompt; ++q) want += ref.probs[l][h][q][k];
        ASSERT_NEAR(rec.columns[h][k], want, 1e-4) << "layer " << l << " head " << h << " key " << k;
        total += rec.columns[h][k];
      }
      EXPECT_NEAR(total, kPrompt, 1e-3);  // every query's probabilities sum to one
    }
  }

  // A one-token block: the columns are that query's attention; a window larger than the block is clipped.
  Recorder step({.window = 4, .accumulated_attention = true});
  decoder->forward(std::span<const int>(&tokens[kPrompt], 1), &step);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(step.layers[l].window, 1);
    for (int h = 0; h < c.n_heads; ++h) {
      ASSERT_EQ(step.layers[l].columns[h].size(), static_cast<size_t>(kPrompt + 1));
      for (int k = 0; k <= kPrompt; ++k) ASSERT_NEAR(step.layers[l].columns[h][k], ref.probs[l][h][kPrompt][k], 1e-5);
    }
  }
}

TEST(ObserverSignals, WindowQueriesAndAccumulatedAttentionMatchTheReference) {
  check_observer_signals(eviction_config(), 300);  // several query tiles and key blocks
}

TEST(ObserverSignals, ParallelKernelsReportTheSameSignals) {
  // Large enough for the multithreaded kernels: several key blocks, two decode chunks to merge.
  ModelConfig c = eviction_config();
  c.n_layers = 1;
  c.dim = 128;
  c.head_dim = 64;
  c.context_length = 1024;
  check_observer_signals(c, 600);
}

// Evicting inside after_layer (cascading) affects the layers' later attention, not the current block.
class EvictHalfAfterEachLayer : public ForwardObserver {
 public:
  ObservationRequest request() const override { return {}; }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      std::vector<int> keep;
      for (int i = 0; i < cache.length(s.layer, h); i += 2) keep.push_back(i);
      cache.keep(s.layer, h, keep);
    }
  }
};

TEST(ObserverSignals, EvictionDuringPrefillDoesNotChangeThatBlock) {
  const ModelConfig c = eviction_config();
  const auto model = make_random_model(c, 5);
  const auto tokens = random_tokens(31, 2);
  auto plain = make_cpu_decoder(*model, {.kv_type = KvType::F32});
  auto evicting = make_cpu_decoder(*model, {.kv_type = KvType::F32});
  const std::vector<float> want = plain->forward(std::span<const int>(tokens.data(), 30));
  EvictHalfAfterEachLayer observer;
  const std::vector<float> got = evicting->forward(std::span<const int>(tokens.data(), 30), &observer);
  for (size_t v = 0; v < want.size(); ++v) ASSERT_FLOAT_EQ(got[v], want[v]);
  EXPECT_EQ(evicting->cache().length(2, 1), 15);
  EXPECT_EQ(evicting->cache().positions(2, 1)[1], 2);
  const auto ref = test::reference_forward(*model, tokens, [](int, int, int q, int k) { return q < 30 || k % 2 == 0 || k == 30; });
  const auto& next = evicting->forward(std::span<const int>(&tokens[30], 1));
  for (int v = 0; v < c.vocab_size; ++v) ASSERT_NEAR(next[v], ref.logits[30][v], 1e-4);
}

}  // namespace
}  // namespace kvevict
