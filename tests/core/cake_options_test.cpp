// CAKE's §8 options (spec shared/spec/policies.md §2, §8) on real stories260K attention: each option
// of policies/cake.yaml, applied by the engine in the real decoder, against the independent C++
// reference (reference_policies.cpp) or a direct computation here; each test also checks that the
// option changes the outcome, so it would fail if the option did nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "reference_policies.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

constexpr int kWindow = 16;

class CakeOptions : public test::StoriesAttentionTest<kWindow> {
 protected:

  static reference::CakeParams params() {
    reference::CakeParams cp;
    cp.window = kWindow;
    return cp;
  }

  static EvictionReport run(std::map<std::string, std::string> set, const std::string& budget) {
    set.emplace("window", std::to_string(kWindow));
    set.emplace("cascading", "false");
    const auto program = load_policy("cake", set);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*program, model_->config, {Budget::parse(budget), 0});
    decoder->forward(std::span<const int>(tokens_), &engine);
    return engine.report();
  }

  static void expect_same(const EvictionReport& got, const reference::KeptSets& want, const std::string& what) {
    ASSERT_EQ(got.layers.size(), want.size()) << what;
    for (size_t l = 0; l < want.size(); ++l)
      for (size_t h = 0; h < want[l].size(); ++h) {
        const std::vector<int32_t> w(want[l][h].begin(), want[l][h].end());
        EXPECT_EQ(got.layers[l][h].kept_positions, w) << what << ": layer " << l << " kv head " << h;
      }
  }

  // The layer weight the compiled cake.yaml gives layer `l` at a given average budget.
  static double layer_weight(const std::map<std::string, std::string>& set, int l, double budget) {
    std::map<std::string, std::string> s = set;
    s.emplace("window", std::to_string(kWindow));
    const auto program = load_policy("cake", s);
    std::vector<std::vector<float>> a;
    LayerWeightInputs lw;
    lw.layer = l;
    lw.n_layers = static_cast<int>(data_->size());
    lw.prompt_len = S();
    lw.budget = budget;
    for (const reference::HeadData& h : (*data_)[l]) a.emplace_back(h.window_attention.begin(), h.window_attention.end());
    for (size_t kv = 0; kv < a.size(); ++kv) {
      ScoreInputs in;
      in.layer = l;
      in.kv_head = static_cast<int>(kv);
      in.n_layers = lw.n_layers;
      in.n_kv_heads = static_cast<int>(a.size());
      in.group = (*data_)[l][kv].G;
      in.head_dim = (*data_)[l][kv].d;
      in.T = S();
      in.prompt_len = S();
      in.W = kWindow;
      in.set_signal(TensorSignal::WindowAttention, a[kv].data());
      lw.heads.push_back(in);
    }
    return program->layer_weight(lw);
  }

};


TEST_F(CakeOptions, PoolMaxAndNoneMatchTheReference) {
  ASSERT_GT(S(), 40 + kWindow);
  const auto avg = reference::cake(*data_, 40, params());
  for (auto [name, kind] : {std::pair{"max", reference::CakeParams::Pool::Max},
                            std::pair{"none", reference::CakeParams::Pool::None}}) {
    reference::CakeParams cp = params();
    cp.pool = kind;
    const auto want = reference::cake(*data_, 40, cp);
    EXPECT_NE(want, avg) << name << " pooling keeps the same tokens as avg: the test proves nothing";
    expect_same(run({{"pool", name}}, "40"), want, std::string("pool ") + name);
  }
  // The kernel is honoured by every pooling that has one.
  reference::CakeParams cp = params();
  cp.pool = reference::CakeParams::Pool::Max;
  cp.kernel = 3;
  expect_same(run({{"pool", "max"}, {"kernel", "3"}}, "40"), reference::cake(*data_, 40, cp), "pool max kernel 3");
}

TEST_F(CakeOptions, RenormaliseRowsChangesThePreferenceAsTheReferenceDoes) {
  reference::CakeParams cp = params();
  cp.renormalise_rows = true;
  const auto pref_code = reference::cake_preferences(*data_, params());
  const auto pref_renorm = reference::cake_preferences(*data_, cp);
  for (int l = 0; l < static_cast<int>(data_->size()); ++l) {
    EXPECT_NEAR(layer_weight({{"renormalise_rows", "true"}}, l, 40), pref_renorm[l], 2e-3 * pref_renorm[l]) << "layer " << l;
    EXPECT_NEAR(layer_weight({}, l, 40), pref_code[l], 2e-3 * pref_code[l]) << "layer " << l;
  }
  // The budgets (and so the kept sets) differ from the code's unnormalised rows.
  ASSERT_NE(reference::cake_budgets(pref_renorm, S(), 40, cp), reference::cake_budgets(pref_code, S(), 40, params()));
  expect_same(run({{"renormalise_rows", "true"}}, "40"), reference::cake(*data_, 40, cp), "renormalise_rows");
}

TEST_F(CakeOptions, TauTableGivesModel2TauAtBudgets128And1024Only) {
  struct Row { const char* model; double t1_1024, t2_1024, t1_128, t2_128; };
  const Row rows[] = {{"llama3.1-8b", 1.6, 0.4, 1.6, 0.6},    {"llama2-7b-chat", 1.9, 1.8, 0.9, 2.3},
                      {"llama2-13b-chat", 0.5, 0.4, 1.8, 2.0}, {"mistral-0.3-7b", 0.8, 0.5, 1.0, 0.8},
                      {"qwen2.5-7b", 1.5, 0.6, 0.4, 0.6}};
  const int l = 1;
  reference::PromptData one_layer{(*data_)[l]};
  auto direct = [&](double t1, double t2) {
    reference::CakeParams cp = params();
    cp.tau1 = t1;
    cp.tau2 = t2;
    return reference::cake_preferences(one_layer, cp)[0];
  };
  const double fallback = direct(1, 1);
  for (const Row& r : rows) {
    for (double budget : {1024.0, 128.0}) {
      const double want = budget == 1024 ? direct(r.t1_1024, r.t2_1024) : direct(r.t1_128, r.t2_128);
      ASSERT_GT(std::fabs(want - fallback), 1e-2 * fallback) << r.model << " " << budget;
      EXPECT_NEAR(layer_weight({{"tau_table", r.model}}, l, budget), want, 5e-3 * want) << r.model << " " << budget;
    }
    // Untabulated budgets use tau1/tau2 (the code's fallback), as does tau_table: fallback.
    EXPECT_NEAR(layer_weight({{"tau_table", r.model}}, l, 40), fallback, 2e-3 * fallback) << r.model;
    EXPECT_NEAR(layer_weight({{"tau_table", r.model}, {"tau1", "2"}}, l, 40), direct(2, 1), 2e-3 * direct(2, 1));
  }
  EXPECT_NEAR(layer_weight({{"tau_table", "fallback"}}, l, 128), fallback, 2e-3 * fallback);
  // End to end at C = 128: the table's taus decide the kept tokens.
  ASSERT_GT(S(), 128 + kWindow);
  reference::CakeParams cp = params();
  cp.tau1 = 0.9;
  cp.tau2 = 2.3;
  ASSERT_NE(reference::cake(*data_, 128, cp), reference::cake(*data_, 128, params()));
  expect_same(run({{"tau_table", "llama2-7b-chat"}}, "128"), reference::cake(*data_, 128, cp), "tau_table 128");
}

}  // namespace
}  // namespace kvevict
