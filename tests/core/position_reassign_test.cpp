// StreamingLLM's position re-assignment (spec §5.1, §8 `streaming.position_mode`): the cache's
// re-rotation of keys (KVCache::reassign_positions), the decoder continuing at the cache length,
// and the built-in streamingllm policy file with position_mode = reassign_in_cache against an
// independent double-precision StreamingLLM in the official code's style (keys stored without
// RoPE and rotated to their index in the cache at every step) on real stories260K weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/decode/decoder.h"
#include "core/decode/kv_cache.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "reference_forward.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.n_layers = 1;
  c.dim = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.hidden_dim = 8;
  c.vocab_size = 10;
  c.context_length = 4096;
  c.rope_theta = 10000;
  return c;
}

// (a) After re-assignment entry t's key is RoPE(pre-RoPE key, t), with RoPE evaluated independently
// (reference_forward.h, double), for both pairing conventions; unmoved entries stay bit-identical.
TEST(PositionReassign, StoredKeysAreRopeOfPreRopeKeyAtCacheIndex) {
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    ModelConfig c = small_config();
    c.rope_style = style;
    KVCache cache(c, KvType::F32);
    Rope rope(c);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    const std::vector<int32_t> positions = {0, 1, 2, 3, 57, 58, 300, 1999, 2000};
    std::vector<std::vector<float>> pre(positions.size(), std::vector<float>(c.head_dim));
    for (size_t t = 0; t < positions.size(); ++t) {
      for (float& x : pre[t]) x = normal(rng);
      std::vector<float> key = pre[t];
      rope.forward(key.data(), positions[t]);
      cache.append(0, 1, positions[t], key.data(), pre[t].data());
    }
    const std::vector<float> before(cache.keys(0, 1), cache.keys(0, 1) + positions.size() * c.head_dim);
    EXPECT_FALSE(cache.positions_reassigned(0, 1));
    EXPECT_EQ(cache.next_position(0, 1, 2001), 2001);
    cache.reassign_positions(0, 1);
    ASSERT_TRUE(cache.positions_reassigned(0, 1));
    EXPECT_FALSE(cache.positions_reassigned(0, 0));
    EXPECT_EQ(cache.next_position(0, 1, 2001), static_cast<int32_t>(positions.size()));
    for (size_t t = 0; t < positions.size(); ++t) {
      EXPECT_EQ(cache.positions(0, 1)[t], static_cast<int32_t>(t));
      const std::vector<double> want = test::ref_rope(std::vector<double>(pre[t].begin(), pre[t].end()), int(t), c);
      for (int i = 0; i < c.head_dim; ++i) {
        const float got = cache.keys(0, 1)[t * c.head_dim + i];
        EXPECT_NEAR(got, want[i], 1e-5) << "entry " << t << " dim " << i;
        if (positions[t] == static_cast<int32_t>(t)) {
          EXPECT_EQ(got, before[t * c.head_dim + i]) << "unmoved entry " << t;
        }
      }
    }
    cache.clear();
    EXPECT_FALSE(cache.positions_reassigned(0, 1));
  }
}

// A codebook head (SpindleKV storage) re-assigns positions only: its keys are rebuilt from pre-RoPE
// codes, so after re-assignment entry t reconstructs as RoPE(code * norm, t).
TEST(PositionReassign, CodebookHeadReconstructsAtTheNewPositions) {
  const ModelConfig c = small_config();
  KVCache cache(c, KvType::F32);
  const std::vector<int32_t> positions = {0, 5, 9, 40};
  std::vector<float> zero(c.head_dim, 0.0f);
  for (int32_t p : positions) cache.append(0, 0, p, zero.data(), zero.data());
  CodebookHead cb;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int code = 0; code < 2; ++code) {
    std::vector<float> v(c.head_dim);
    double n2 = 0;
    for (float& x : v) {
      x = normal(rng);
      n2 += double(x) * x;
    }
    for (float& x : v) x = static_cast<float>(x / std::sqrt(n2));
    cb.key_codes.insert(cb.key_codes.end(), v.begin(), v.end());
    cb.value_codes.insert(cb.value_codes.end(), v.begin(), v.end());
  }
  cb.key_index = cb.value_index = {0, 1, 1, 0};
  cb.key_norm = cb.value_norm = {1.5f, 2.0f, 0.5f, 3.0f};
  cache.set_codebook(0, 0, cb);
  cache.reassign_positions(0, 0);
  std::vector<float> keys(positions.size() * c.head_dim);
  cache.reconstruct_keys(0, 0, 0, static_cast<int>(positions.size()), keys.data());
  for (size_t t = 0; t < positions.size(); ++t) {
    EXPECT_EQ(cache.positions(0, 0)[t], static_cast<int32_t>(t));
    std::vector<double> pre(c.head_dim);
    for (int i = 0; i < c.head_dim; ++i) pre[i] = double(cb.key_codes[cb.key_index[t] * c.head_dim + i]) * cb.key_norm[t];
    const std::vector<double> want = test::ref_rope(pre, int(t), c);
    for (int i = 0; i < c.head_dim; ++i) EXPECT_NEAR(keys[t * c.head_dim + i], want[i], 1e-5) << "entry " << t;
  }
}

// ---- stories260K ----------------------------------------------------------------------------

constexpr int kSinks = 4;
constexpr int kBudget = 40;

using StoriesReassign = test::StoriesPromptTest;

// Tokens fed after the prompt (teacher forcing keeps both runs on the same inputs).
std::vector<int> continuation(int n) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back(100 + 37 * i % 400);
  return t;
}

// (a) on real keys: after streamingllm's eviction and re-assignment, the key at cache index t is
// RoPE(pre-RoPE key of its original token, t), the pre-RoPE key taken from a run without eviction.
TEST_F(StoriesReassign, EvictedCacheHoldsKeysRotatedToTheirCacheIndex) {
  auto full = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  full->forward(std::span<const int>(tokens_));
  const auto program = load_policy("streamingllm", {{"position_mode", "reassign_in_cache"}});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*program, model_->config, {Budget::parse(std::to_string(kBudget)), 0});
  decoder->forward(std::span<const int>(tokens_), &engine);
  const ModelConfig& c = model_->config;
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_kv_heads; ++h) {
      ASSERT_EQ(decoder->cache().length(l, h), kBudget);
      const std::vector<float> pre = full->cache().keys_pre_rope(l, h);
      const std::vector<int32_t>& kept = engine.report().layers[l][h].kept_positions;
      for (int t = 0; t < kBudget; ++t) {
        // StreamingLLM keeps the sinks and the newest tokens: cache index t holds this token.
        const int original = t < kSinks ? t : S() - (kBudget - t);
        ASSERT_EQ(kept[t], original);  // the report still speaks original positions
        EXPECT_EQ(decoder->cache().positions(l, h)[t], t);
        const std::vector<double> want = test::ref_rope(
            std::vector<double>(pre.begin() + size_t(original) * c.head_dim, pre.begin() + size_t(original + 1) * c.head_dim), t, c);
        for (int i = 0; i < c.head_dim; ++i)
          ASSERT_NEAR(decoder->cache().keys(l, h)[size_t(t) * c.head_dim + i], want[i], 1e-5) << "layer " << l << " head " << h << " t " << t;
      }
    }
  }
}

// (b) A budget equal to the whole prompt evicts nothing: re-assignment is then an identity and the
// decoder's positions (cache length) equal the token indices, so the logits equal the plain
// decoder's bit for bit.
TEST_F(StoriesReassign, NoEvictionEqualsThePlainDecoderExactly) {
  const auto program = load_policy("streamingllm", {{"position_mode", "reassign_in_cache"}, {"mode", "prefill_one_shot"}});
  auto plain = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*program, model_->config, {Budget::parse(std::to_string(S())), 0});
  std::vector<float> a = plain->forward(std::span<const int>(tokens_));
  std::vector<float> b = decoder->forward(std::span<const int>(tokens_), &engine);
  ASSERT_EQ(a, b);
  ASSERT_TRUE(decoder->cache().positions_reassigned(0, 0)) << "the re-assigning path was not taken";
  for (int step = 0; step < 20; ++step) {
    const int next = static_cast<int>(std::max_element(a.begin(), a.end()) - a.begin());
    a = plain->forward(std::vector<int>{next});
    b = decoder->forward(std::vector<int>{next}, &engine);
    ASSERT_EQ(a, b) << "step " << step;
  }
}

// An independent StreamingLLM in the official code's style, in double: per (layer, KV head) the
// cache holds pre-RoPE keys and values; keys are rotated at attention time to their index in the
// cache (reassign) or to their original position (true positions); a new token's query and key
// take position = cache length (reassign) or its index in the sequence. After every token the
// cache keeps the sinks and the newest tokens, `budget` in all. The prompt's K/V come from the
// decoder's full (never evicted) cache, pre-RoPE; everything after the prompt is computed here.
class ReferenceStreaming {
 public:
  ReferenceStreaming(const Model& m, const KVCache& full, int prompt_len, int budget, bool reassign)
      : m_(m), c_(m.config), budget_(budget), reassign_(reassign), next_position_(prompt_len) {
    heads_.resize(size_t(c_.n_layers) * c_.n_kv_heads);
    for (int l = 0; l < c_.n_layers; ++l) {
      for (int h = 0; h < c_.n_kv_heads; ++h) {
        const std::vector<float> pre = full.keys_pre_rope(l, h);
        const float* values = full.values(l, h);
        Head& hd = head(l, h);
        for (int t = 0; t < prompt_len; ++t) {
          hd.keys.emplace_back(pre.begin() + size_t(t) * c_.head_dim, pre.begin() + size_t(t + 1) * c_.head_dim);
          hd.values.emplace_back(values + size_t(t) * c_.head_dim, values + size_t(t + 1) * c_.head_dim);
          hd.positions.push_back(t);
        }
        evict(hd);
      }
    }
  }

  std::vector<double> step(int token) {
    const Weights& w = m_.weights;
    const int D = c_.dim, hd = c_.head_dim, G = c_.group_size();
    std::vector<double> x(D);
    for (int i = 0; i < D; ++i) x[i] = w.token_embedding[size_t(token) * D + i];
    for (int l = 0; l < c_.n_layers; ++l) {
      const LayerWeights& L = w.layers[l];
      const auto xn = rmsnorm(x, L.attn_norm);
      const auto q = matvec(L.wq, xn, c_.q_dim(), &L.bq);
      const auto k = matvec(L.wk, xn, c_.kv_dim(), &L.bk);
      const auto v = matvec(L.wv, xn, c_.kv_dim(), &L.bv);
      for (int h = 0; h < c_.n_kv_heads; ++h) {
        Head& H = head(l, h);
        H.keys.emplace_back(k.begin() + h * hd, k.begin() + (h + 1) * hd);
        H.values.emplace_back(v.begin() + h * hd, v.begin() + (h + 1) * hd);
        H.positions.push_back(next_position_);
      }
      std::vector<double> att(c_.q_dim(), 0.0);
      for (int qh = 0; qh < c_.n_heads; ++qh) {
        const Head& H = head(l, qh / G);
        const int n = static_cast<int>(H.keys.size());
        auto rotary = [&](int t) { return reassign_ ? t : H.positions[t]; };
        const auto qr = test::ref_rope(std::vector<double>(q.begin() + qh * hd, q.begin() + (qh + 1) * hd), rotary(n - 1), c_);
        std::vector<double> s(n);
        double mx = -INFINITY;
        for (int t = 0; t < n; ++t) {
          const auto kr = test::ref_rope(H.keys[t], rotary(t), c_);
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += qr[i] * kr[i];
          s[t] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[t]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int t = 0; t < n; ++t)
          for (int i = 0; i < hd; ++i) att[qh * hd + i] += s[t] / sum * H.values[t][i];
      }
      const auto o = matvec(L.wo, att, D, nullptr);
      for (int i = 0; i < D; ++i) x[i] += o[i];
      const auto xf = rmsnorm(x, L.ffn_norm);
      auto g = matvec(L.w_gate, xf, c_.hidden_dim, nullptr);
      const auto u = matvec(L.w_up, xf, c_.hidden_dim, nullptr);
      for (int i = 0; i < c_.hidden_dim; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const auto down = matvec(L.w_down, g, D, nullptr);
      for (int i = 0; i < D; ++i) x[i] += down[i];
      for (int h = 0; h < c_.n_kv_heads; ++h) evict(head(l, h));
    }
    ++next_position_;
    return matvec(w.output_matrix(), rmsnorm(x, w.final_norm), c_.vocab_size, nullptr);
  }

 private:
  struct Head {
    std::vector<std::vector<double>> keys, values;  // pre-RoPE keys
    std::vector<int> positions;                     // original positions
  };
  Head& head(int l, int h) { return heads_[size_t(l) * c_.n_kv_heads + h]; }
  // Sinks + newest: drop the oldest non-sink entries.
  void evict(Head& h) const {
    const int drop = static_cast<int>(h.keys.size()) - budget_;
    if (drop <= 0) return;
    h.keys.erase(h.keys.begin() + kSinks, h.keys.begin() + kSinks + drop);
    h.values.erase(h.values.begin() + kSinks, h.values.begin() + kSinks + drop);
    h.positions.erase(h.positions.begin() + kSinks, h.positions.begin() + kSinks + drop);
  }
  std::vector<double> matvec(const std::vector<float>& W, const std::vector<double>& x, int out,
                             const std::vector<float>* bias) const {
    std::vector<double> y(out);
    for (int o = 0; o < out; ++o) {
      double s = bias && !bias->empty() ? (*bias)[o] : 0.0;
      for (size_t i = 0; i < x.size(); ++i) s += double(W[o * x.size() + i]) * x[i];
      y[o] = s;
    }
    return y;
  }
  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<float>& g) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / x.size() + c_.norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
    return y;
  }

  const Model& m_;
  const ModelConfig& c_;
  int budget_;
  bool reassign_;
  int next_position_;
  std::vector<Head> heads_;
};

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

// (c) With eviction, per step: the decoder's logits equal the independent reference of the same
// mode, and differ from the reference of the other mode (the option changes the computation).
TEST_F(StoriesReassign, LogitsAfterEvictionMatchAnIndependentStreamingLLM) {
  auto full = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  full->forward(std::span<const int>(tokens_));
  const std::vector<int> next = continuation(6);
  for (const bool reassign : {true, false}) {
    const std::string mode = reassign ? "reassign_in_cache" : "true_positions";
    const auto program = load_policy("streamingllm", {{"position_mode", mode}});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*program, model_->config, {Budget::parse(std::to_string(kBudget)), 0});
    decoder->forward(std::span<const int>(tokens_), &engine);
    ReferenceStreaming same(*model_, full->cache(), S(), kBudget, reassign);
    ReferenceStreaming other(*model_, full->cache(), S(), kBudget, !reassign);
    for (size_t i = 0; i < next.size(); ++i) {
      const std::vector<float> got = decoder->forward(std::vector<int>{next[i]}, &engine);
      const std::vector<double> want = same.step(next[i]);
      const std::vector<double> wrong = other.step(next[i]);
      EXPECT_LT(max_abs_diff(got, want), 1e-4) << mode << ", step " << i;
      EXPECT_GT(max_abs_diff(got, wrong), 1e-2) << mode << ", step " << i << ": the two modes agree";
      EXPECT_EQ(decoder->cache().length(0, 0), kBudget);
    }
    EXPECT_EQ(decoder->cache().positions_reassigned(0, 0), reassign);
  }
}

// The eval sweep's path (evals/engine_evictor.cpp): record a full prefill, restore the full cache,
// apply_after_prefill, decode without the engine (one-shot mode). It must equal a live run: the
// re-assigned mark travels with the cache, so the decoder continues at the cache length.
TEST_F(StoriesReassign, SweepReplayEqualsALiveRun) {
  const auto program = load_policy("streamingllm", {{"mode", "prefill_one_shot"}});
  ASSERT_TRUE(program->description().run.reassign_positions);
  const Budget budget = Budget::parse(std::to_string(kBudget));
  auto live = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine live_engine(*program, model_->config, {budget, 0});
  std::vector<float> a = live->forward(std::span<const int>(tokens_), &live_engine);

  auto sweep = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder recorder(0, false);
  std::vector<float> b = sweep->forward(std::span<const int>(tokens_), &recorder);
  const KVCache snapshot = sweep->cache();
  sweep->cache() = snapshot;
  sweep->set_position(S());
  EvictionEngine replay(*program, model_->config, {budget, 0});
  replay.apply_after_prefill(recorder, sweep->cache());
  ASSERT_TRUE(sweep->cache().positions_reassigned(0, 0));
  EXPECT_EQ(replay.report().layers[0][0].kept_positions, live_engine.report().layers[0][0].kept_positions);
  for (const int next : continuation(5)) {
    a = live->forward(std::vector<int>{next});
    b = sweep->forward(std::vector<int>{next});
    ASSERT_EQ(a, b);
  }
  EXPECT_EQ(sweep->cache().positions(0, 0)[kBudget + 4], kBudget + 4);
}

}  // namespace
}  // namespace kvevict
