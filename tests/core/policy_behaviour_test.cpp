// The built-in policy files through the real decoder (stories260K): budgets add up exactly,
// protected tokens are always kept, seeded draws repeat and different seeds change NACL's random
// share only, and decode-time triggers hold the cache at its budget over 200 generated tokens.
// (Cascading vs one-shot for CAKE is in policy_equivalence_test.cpp; the engine's own tests cover
// the peak bytes and the allocator with hand-written programs.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

class PolicyBehaviour : public test::StoriesPromptTest {
 protected:

  static EvictionReport prefill(const PolicyProgram& p, const std::string& budget, uint64_t seed = 0) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(p, model_->config, {Budget::parse(budget), seed});
    decoder->forward(std::span<const int>(tokens_), &engine);
    return engine.report();
  }
};

const std::vector<std::string> kEvicting = {"random", "streamingllm", "h2o", "tova",  "snapkv",   "pyramidkv",
                                            "adakv",  "knorm",        "cake", "nacl", "spindlekv"};

TEST_F(PolicyBehaviour, BudgetsAddUpExactlyAndProtectedTokensAreKept) {
  const int L = model_->config.n_layers, H = model_->config.n_kv_heads;
  for (const std::string& name : kEvicting) {
    // Defaults, except NACL's: its code_head split protects 256 sinks, more than these budgets hold
    // (spec §3.5 pitfall 2); the explicit split protects 4 sinks + 6% of the prompt.
    std::map<std::string, std::string> set;
    if (name == "spindlekv") set = {{"codebook", "false"}};
    if (name == "nacl") set = {{"budget_split", "explicit"}, {"explicit_sinks", "4"}, {"explicit_protect", "0.06"}};
    const auto p = load_policy(name, set);
    for (const std::string budget : {"48", "25%"}) {
      SCOPED_TRACE(name + " at " + budget);
      const EvictionReport r = prefill(*p, budget, 5);
      ASSERT_TRUE(r.prefill_evicted);
      const int64_t want = std::llround(Budget::parse(budget).tokens_per_head(S()) * L) * H;
      int64_t kept = 0, budgets = 0;
      const PolicyProtect prot = p->protect_for(S());
      ASSERT_LE(prot.first + prot.recent, std::min(48, S() / 4)) << "protected tokens must fit the budget";
      for (int l = 0; l < L; ++l) {
        for (int h = 0; h < H; ++h) {
          const HeadReport& head = r.layers[l][h];
          kept += head.kept;
          budgets += head.budget;
          ASSERT_EQ(head.kept, static_cast<int>(head.kept_positions.size()));
          EXPECT_TRUE(std::is_sorted(head.kept_positions.begin(), head.kept_positions.end()));
          const std::set<int32_t> k(head.kept_positions.begin(), head.kept_positions.end());
          for (int i = 0; i < std::min(prot.first, S()); ++i) EXPECT_TRUE(k.count(i)) << "sink " << i << " layer " << l;
          for (int i = std::max(0, S() - prot.recent); i < S(); ++i) EXPECT_TRUE(k.count(i)) << "recent " << i << " layer " << l;
        }
      }
      EXPECT_EQ(kept, want);
      EXPECT_EQ(budgets, want);  // Ada-KV moves budget between heads, never in or out of a layer
      EXPECT_LT(r.bytes_kept, r.bytes_full);
    }
  }
}

TEST_F(PolicyBehaviour, SeedsRepeatAndChangeOnlyNaclsRandomShare) {
  const auto p = load_policy("nacl", {{"budget_split", "explicit"}, {"explicit_proxy", "0.05"}, {"explicit_sinks", "4"},
                                      {"explicit_protect", "0.04"}, {"explicit_top", "0.1"}, {"explicit_random", "0.1"}});
  const auto top_only = load_policy("nacl", {{"budget_split", "explicit"}, {"explicit_proxy", "0.05"},
                                             {"explicit_sinks", "4"}, {"explicit_protect", "0.04"},
                                             {"explicit_top", "0.2"}, {"explicit_random", "0"}});
  const EvictionReport a = prefill(*p, "40", 11), a2 = prefill(*p, "40", 11), b = prefill(*p, "40", 12);
  const EvictionReport t = prefill(*top_only, "40", 11);
  int changed = 0;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (size_t h = 0; h < a.layers[l].size(); ++h) {
      EXPECT_EQ(a.layers[l][h].kept_positions, a2.layers[l][h].kept_positions);
      const auto& x = a.layers[l][h].kept_positions;
      const auto& y = b.layers[l][h].kept_positions;
      ASSERT_EQ(x.size(), y.size());
      changed += x != y;
      // Both seeds keep the protected tokens and the same top-k half: what they share covers the
      // protected set plus half of the free budget, and the deterministic top-k is a prefix of the
      // top-only policy's ranking.
      std::vector<int32_t> shared;
      std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(shared));
      const PolicyProtect prot = p->protect_for(S());
      const int free = 40 - prot.first - prot.recent;
      EXPECT_GE(static_cast<int>(shared.size()), prot.first + prot.recent + free / 2);
      const auto& z = t.layers[l][h].kept_positions;
      std::vector<int32_t> in_top;
      std::set_intersection(x.begin(), x.end(), z.begin(), z.end(), std::back_inserter(in_top));
      EXPECT_GE(static_cast<int>(in_top.size()), prot.first + prot.recent + free / 2);
    }
  }
  EXPECT_GT(changed, 0) << "a different seed should change the random share somewhere";
  const auto r = load_policy("random");
  EXPECT_EQ(prefill(*r, "40", 1).layers[0][0].kept_positions, prefill(*r, "40", 1).layers[0][0].kept_positions);
  EXPECT_NE(prefill(*r, "40", 1).layers[0][0].kept_positions, prefill(*r, "40", 2).layers[0][0].kept_positions);
}

TEST_F(PolicyBehaviour, CakeCascadingPeakStaysNearTheFinalBudget) {
  // The cake.yaml file with cascading on: after each layer the budget is re-split and every layer
  // seen so far shrinks, so the cache never holds more than the earlier layers' budgets plus one
  // full layer. One-shot holds every full layer until the end (peak = full cache).
  const auto cascading = load_policy("cake", {{"window", "16"}, {"cascading", "true"}});
  const auto one_shot = load_policy("cake", {{"window", "16"}, {"cascading", "false"}});
  const EvictionReport c = prefill(*cascading, "40"), o = prefill(*one_shot, "40");
  ASSERT_TRUE(c.prefill_evicted);
  EXPECT_EQ(c.bytes_kept, o.bytes_kept);
  EXPECT_EQ(o.peak_bytes, o.bytes_full);
  const size_t one_layer = o.bytes_full / model_->config.n_layers;
  EXPECT_LE(c.peak_bytes, c.bytes_kept + one_layer);
  const double ratio = static_cast<double>(c.peak_bytes) / static_cast<double>(c.bytes_kept);
  std::cout << "cake cascading peak / final bytes = " << ratio << " (one-shot: "
            << static_cast<double>(o.peak_bytes) / static_cast<double>(o.bytes_kept) << ")\n";
  RecordProperty("cascading_peak_over_final", std::to_string(ratio));
  EXPECT_LT(ratio, 2.5);
}

// Greedy decoding (stop tokens ignored) for 200 steps; after every step each (layer, KV head)
// holds exactly its budget.
void expect_held_at_budget(const Model& model, const std::vector<int>& prompt, const PolicyProgram& p,
                           const std::string& budget) {
  auto decoder = make_cpu_decoder(model, {.threads = 1});
  EvictionEngine engine(p, model.config, {Budget::parse(budget), 0});
  const std::vector<float>* logits = &decoder->forward(prompt, &engine);
  const EvictionReport before = engine.report();
  ASSERT_TRUE(before.prefill_evicted);
  for (int step = 0; step < 200; ++step) {
    const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
    for (int l = 0; l < model.config.n_layers; ++l)
      for (int h = 0; h < model.config.n_kv_heads; ++h)
        ASSERT_EQ(decoder->cache().length(l, h), before.layers[l][h].budget)
            << p.description().name << " step " << step << " layer " << l << " head " << h;
  }
  EXPECT_EQ(engine.report().decode_steps, 200);
  EXPECT_GE(engine.report().applications, 200);
  // Original positions (the report's: streamingllm re-assigns the cache's own positions by
  // default) stay unique and the newest token is always in the cache.
  const KVCache& c = decoder->cache();
  for (int l = 0; l < model.config.n_layers; ++l) {
    const std::vector<int32_t>& pos = engine.report().layers[l][0].kept_positions;
    ASSERT_EQ(static_cast<int>(pos.size()), c.length(l, 0));
    std::set<int32_t> seen(pos.begin(), pos.end());
    EXPECT_EQ(static_cast<int>(seen.size()), c.length(l, 0));
    EXPECT_TRUE(seen.count(decoder->position() - 1));
  }
}

TEST_F(PolicyBehaviour, DecodeTriggersHoldTheCacheAtItsBudgetFor200Tokens) {
  ASSERT_LE(S() + 200, model_->config.context_length);
  expect_held_at_budget(*model_, tokens_, *load_policy("streamingllm", {{"mode", "per_step"}}), "40");
  expect_held_at_budget(*model_, tokens_, *load_policy("cake", {{"window", "16"}}), "40");
  expect_held_at_budget(*model_, tokens_, *load_policy("tova"), "32");
}

}  // namespace
}  // namespace kvevict
