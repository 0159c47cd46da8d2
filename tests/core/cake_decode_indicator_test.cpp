// cake.decode_indicator = mean_plus_gamma_var (spec §2.4, §2.6, §8): at every decode step a layer
// over budget drops one token by the paper's indicator, mean + gamma * unbiased variance of the
// attention of the last W queries (prompt and generated), pooled, GQA mean. A spy observer wraps
// the engine, keeps its own copy of the last W queries and snapshots each layer's cache before the
// engine acts; the decision is recomputed here in double from those and compared with what the
// engine kept. The same check against the code's current_attention indicator must disagree at some
// step, so the test fails if the option were ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

constexpr int kWindow = 16;
constexpr double kGamma = 200.0;

struct Snapshot {
  int T = 0;
  std::vector<float> keys;  // [T][d]
  std::vector<int32_t> pos;
};

class Spy : public ForwardObserver {
 public:
  Spy(EvictionEngine& engine, const ModelConfig& c) : engine_(engine), c_(c), rows_(c.n_layers) {}
  ObservationRequest request() const override { return engine_.request(); }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    auto& rows = rows_[s.layer];
    const size_t row = static_cast<size_t>(c_.n_heads) * c_.head_dim;
    for (int i = 0; i < s.window; ++i) {
      Row r;
      r.pos = s.first_position + s.n_tokens - s.window + i;
      r.q.assign(s.window_queries.begin() + i * row, s.window_queries.begin() + (i + 1) * row);
      rows.push_back(std::move(r));
    }
    while (static_cast<int>(rows.size()) > kWindow) rows.erase(rows.begin());
    if (decoding) {
      before[s.layer].assign(c_.n_kv_heads, {});
      for (int h = 0; h < c_.n_kv_heads; ++h) {
        Snapshot& sn = before[s.layer][h];
        sn.T = cache.length(s.layer, h);
        sn.keys.assign(cache.keys(s.layer, h), cache.keys(s.layer, h) + static_cast<size_t>(sn.T) * c_.head_dim);
        sn.pos.assign(cache.positions(s.layer, h), cache.positions(s.layer, h) + sn.T);
      }
    }
    engine_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { engine_.after_forward(n, cache); }

  struct Row { int pos = 0; std::vector<float> q; };  // [n_heads][head_dim]
  const std::vector<Row>& rows(int layer) const { return rows_[layer]; }
  bool decoding = false;
  std::vector<std::vector<Snapshot>> before;  // [layer][kv head], this step

 private:
  EvictionEngine& engine_;
  const ModelConfig& c_;
  std::vector<std::vector<Row>> rows_;
};

// The decision for one (layer, KV head): kept positions, ascending. The last W cache slots are the
// window (always kept); the others are ranked by the indicator over slots 0..T-W-1, avg-pooled
// (kernel 5, zero padding counted), group mean; higher first, then smaller position.
std::vector<int32_t> expected_kept(const Snapshot& sn, const std::vector<Spy::Row>& rows, int kv, const ModelConfig& c,
                                   int budget, bool paper) {
  const int G = c.group_size(), d = c.head_dim, n = sn.T - kWindow;
  std::vector<double> score(n, 0.0);
  const size_t first_row = paper ? 0 : rows.size() - 1;
  for (int g = 0; g < G; ++g) {
    const int qh = kv * G + g;
    std::vector<std::vector<double>> a;  // [row][slot]
    for (size_t r = first_row; r < rows.size(); ++r) {
      std::vector<double> logit(sn.T, -INFINITY);
      double mx = -INFINITY;
      for (int t = 0; t < sn.T; ++t) {
        if (sn.pos[t] > rows[r].pos) continue;  // causal by original positions
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += static_cast<double>(rows[r].q[static_cast<size_t>(qh) * d + e]) * sn.keys[static_cast<size_t>(t) * d + e];
        logit[t] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, logit[t]);
      }
      double z = 0;
      for (double& v : logit) z += (v = std::isinf(v) ? 0.0 : std::exp(v - mx));
      for (double& v : logit) v /= z;
      a.push_back(std::move(logit));
    }
    const int R = static_cast<int>(a.size());
    std::vector<double> ind(n);
    for (int t = 0; t < n; ++t) {
      double mean = 0, var = 0;
      for (int r = 0; r < R; ++r) mean += a[r][t] / R;
      for (int r = 0; r < R; ++r) var += (a[r][t] - mean) * (a[r][t] - mean);
      ind[t] = paper ? mean + kGamma * (R > 1 ? var / (R - 1) : 0.0) : mean;
    }
    reference::CakeParams cp;
    const auto pooled = reference::cake_pool(ind, cp);
    for (int t = 0; t < n; ++t) score[t] += pooled[t] / G;
  }
  std::vector<int> slots(n);
  for (int t = 0; t < n; ++t) slots[t] = t;
  std::stable_sort(slots.begin(), slots.end(), [&](int x, int y) {
    if (score[x] != score[y]) return score[x] > score[y];
    return sn.pos[x] < sn.pos[y];
  });
  std::vector<int32_t> kept;
  for (int i = 0; i < budget - kWindow; ++i) kept.push_back(sn.pos[slots[i]]);
  for (int t = n; t < sn.T; ++t) kept.push_back(sn.pos[t]);
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(CakeDecodeIndicator, MeanPlusGammaVarHoldsTheBudgetAndMatchesADirectComputation) {
  if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  auto model = load_model(test::stories_checkpoint());
  const ModelConfig& c = model->config;
  const std::vector<int> prompt = model->tokenizer->encode(test::kPolicyTestStory, true);
  const auto policy = load_policy("cake", {{"window", std::to_string(kWindow)}, {"decode_indicator", "mean_plus_gamma_var"}});
  ASSERT_TRUE(policy->description().run.decode_uses_window_attention);
  ASSERT_FALSE(policy->description().needs(TensorSignal::CurrentAttention));  // the code's branch is compiled out
  EXPECT_EQ(policy->description().params.at("decode_indicator"), "mean_plus_gamma_var");

  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, c, {Budget::parse("40"), 0});
  Spy spy(engine, c);
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(prompt), &spy);
  const EvictionReport prefill = engine.report();
  ASSERT_TRUE(prefill.prefill_evicted);
  spy.decoding = true;
  spy.before.assign(c.n_layers, {});
  int checked = 0, differs_from_code = 0;
  for (int step = 0; step < 24; ++step) {
    const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    logits = &decoder->forward(std::span<const int>(&next, 1), &spy);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const int budget = prefill.layers[l][h].budget;
        const Snapshot& sn = spy.before[l][h];
        ASSERT_EQ(decoder->cache().length(l, h), budget) << "step " << step << " layer " << l << " head " << h;
        ASSERT_EQ(sn.T, budget + 1) << "one new token per step";
        std::vector<int32_t> got(decoder->cache().positions(l, h), decoder->cache().positions(l, h) + budget);
        std::sort(got.begin(), got.end());
        const auto want = expected_kept(sn, spy.rows(l), h, c, budget, true);
        EXPECT_EQ(got, want) << "step " << step << " layer " << l << " head " << h;
        differs_from_code += want != expected_kept(sn, spy.rows(l), h, c, budget, false);
        ++checked;
      }
  }
  EXPECT_EQ(checked, 24 * c.n_layers * c.n_kv_heads);
  EXPECT_GT(differs_from_code, 0) << "the paper's and the code's indicators agreed everywhere: the test proves nothing";
}

}  // namespace
}  // namespace kvevict
