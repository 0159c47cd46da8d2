// NACL's spec §8 choices as parameters of policies/nacl.yaml (proxy_causal, keep_proxy,
// decode_interval, gqa_head_map, and the seed), each run through the DSL and the eviction engine
// inside the real decoder on stories260K (G = 2) and compared with the independent reference of
// tests/core/reference_nacl.cpp; each option must also change the kept set (else the test would
// pass with the option ignored). The engine mechanisms behind them (PolicyObserve) are also
// checked with hand-written PolicyPrograms, and the eval sweep path (PrefillRecorder +
// apply_after_prefill, evals/engine_evictor.cpp) against the live run.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "evals/prefill_evictor.h"
#include "hand_policies.h"
#include "policy_test_prompt.h"
#include "reference_nacl.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

constexpr int kProxy = 16;   // proxy rows W
constexpr int kBudget = 32;  // 4 sinks + 8 recent + 20 free, half of the free budget sampled

using Set = std::map<std::string, std::string>;

class NaclOptions : public test::StoriesPromptTest {
 protected:
  static void SetUpTestSuite() {
    if (!load()) return;
    forced_ = model_->tokenizer->encode(" Tom and Lily looked under the big tree and found a small box.", false);
    causal_ = new reference::PromptData(reference::collect(*model_, tokens_, kProxy));
    noncausal_ = new reference::PromptData(reference::collect(*model_, tokens_, kProxy, /*causal_window=*/false));
  }
  static void TearDownTestSuite() {
    delete causal_;
    delete noncausal_;
    causal_ = noncausal_ = nullptr;
    unload();
  }


  // The explicit split every test starts from: 16 proxy rows, 4 sinks, protect 12 (= 4 sinks + 8
  // recent), top and random 1:1.
  static Set base(Set extra = {}) {
    Set s = {{"budget_split", "explicit"}, {"explicit_proxy", share_of_prompt(kProxy)}, {"explicit_sinks", "4"},
             {"explicit_protect", share_of_prompt(12)}, {"explicit_top", "0.1"}, {"explicit_random", "0.1"}};
    for (const auto& [k, v] : extra) s[k] = v;
    return s;
  }

  static reference::NaclVariant variant(uint64_t seed) {
    reference::NaclVariant v;
    v.budget = kBudget;
    v.sinks = 4;
    v.recent = 8;
    v.random_share = 0.5;
    v.seed = seed;
    return v;
  }

  // Prefill, then `decode_steps` of the forced continuation, one token per forward call.
  static EvictionReport run(const Set& set, uint64_t seed, int decode_steps = 0) {
    const auto program = load_policy("nacl", set);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*program, model_->config, {Budget::parse(std::to_string(kBudget)), seed});
    decoder->forward(std::span<const int>(tokens_), &engine);
    for (int i = 0; i < decode_steps; ++i) decoder->forward(std::span<const int>(&forced_.at(i), 1), &engine);
    return engine.report();
  }

  static reference::KeptSets kept(const EvictionReport& r) {
    reference::KeptSets out(r.layers.size());
    for (size_t l = 0; l < r.layers.size(); ++l)
      for (const auto& h : r.layers[l]) out[l].emplace_back(h.kept_positions.begin(), h.kept_positions.end());
    return out;
  }

  static void expect_same(const reference::KeptSets& got, const reference::KeptSets& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t l = 0; l < want.size(); ++l) {
      ASSERT_EQ(got[l].size(), want[l].size()) << what;
      for (size_t h = 0; h < want[l].size(); ++h) EXPECT_EQ(got[l][h], want[l][h]) << what << ": layer " << l << " kv head " << h;
    }
  }

  static int differing_heads(const reference::KeptSets& a, const reference::KeptSets& b) {
    int n = 0;
    for (size_t l = 0; l < a.size(); ++l)
      for (size_t h = 0; h < a[l].size(); ++h) n += a[l][h] != b[l][h];
    return n;
  }

  static std::vector<int> forced_;
  static reference::PromptData *causal_, *noncausal_;
};

std::vector<int> NaclOptions::forced_;
reference::PromptData* NaclOptions::causal_ = nullptr;
reference::PromptData* NaclOptions::noncausal_ = nullptr;

TEST_F(NaclOptions, ProxyCausalDefaultIsTheCodesNonCausalScoring) {
  for (uint64_t seed : {1u, 2u}) {
    const auto noncausal = kept(run(base(), seed));
    const auto causal = kept(run(base({{"proxy_causal", "true"}}), seed));
    expect_same(noncausal, reference::nacl_variant(*noncausal_, variant(seed)), "proxy_causal=false (default)");
    expect_same(causal, reference::nacl_variant(*causal_, variant(seed)), "proxy_causal=true");
    EXPECT_GT(differing_heads(noncausal, causal), 0) << "proxy_causal changed nothing (seed " << seed << ")";
  }
}

TEST_F(NaclOptions, KeepProxyAllProtectsTheWholeProxySpan) {
  reference::NaclVariant v = variant(3);
  v.keep_all_proxy = true;
  const auto all = kept(run(base({{"keep_proxy", "all"}}), 3));
  expect_same(all, reference::nacl_variant(*noncausal_, v), "keep_proxy=all");
  for (const auto& layer : all)
    for (const auto& h : layer)
      for (int p = S() - kProxy; p < S(); ++p) EXPECT_TRUE(std::binary_search(h.begin(), h.end(), p)) << "proxy position " << p;
  EXPECT_GT(differing_heads(all, kept(run(base(), 3))), 0) << "keep_proxy=all changed nothing";
}

TEST_F(NaclOptions, GqaHeadMapCodeCompatScoresKvHeadJWithQueryHeadJ) {
  // Spec §9 question 3 on a GQA model (stories260K: 8 query heads, 4 KV heads, G = 2): with the
  // official code's rows 0..H_kv-1, KV heads 2 and 3 are ranked by query heads 2 and 3, which
  // belong to KV head 1; KV heads 0 and 1 by one query head of group 0 each.
  ASSERT_EQ(model_->config.group_size(), 2);
  reference::NaclVariant v = variant(4);
  v.code_head_map = true;
  const auto compat = kept(run(base({{"gqa_head_map", "code_compat"}}), 4));
  expect_same(compat, reference::nacl_variant(*noncausal_, v), "gqa_head_map=code_compat");
  const auto group = kept(run(base(), 4));
  int differ_foreign = 0;  // KV heads scored by another group's query head
  for (size_t l = 0; l < group.size(); ++l)
    for (size_t h = 2; h < group[l].size(); ++h) differ_foreign += group[l][h] != compat[l][h];
  EXPECT_GT(differ_foreign, 0) << "the head map changed nothing on KV heads 2..3";
  // Causal proxy scoring with the same head map (the two options compose).
  expect_same(kept(run(base({{"gqa_head_map", "code_compat"}, {"proxy_causal", "true"}}), 4)),
              reference::nacl_variant(*causal_, v), "code_compat + causal");
}

TEST_F(NaclOptions, DecodeIntervalReappliesTheRuleEveryMSteps) {
  constexpr int kSteps = 12, kInterval = 4;
  ASSERT_GE(static_cast<int>(forced_.size()), kSteps);
  const std::vector<int> forced(forced_.begin(), forced_.begin() + kSteps);
  reference::NaclDecodeParams p;
  p.v = variant(5);
  p.proxy = kProxy;
  p.interval = kInterval;
  const EvictionReport r = run(base({{"decode_interval", std::to_string(kInterval)}}), 5, kSteps);
  expect_same(kept(r), reference::nacl_with_decode(*model_, tokens_, forced, p), "decode_interval=4");
  EXPECT_EQ(r.applications, 1 + (kSteps / kInterval) * model_->config.n_layers);
  for (const auto& layer : r.layers)
    for (const auto& h : layer) EXPECT_EQ(h.kept, kBudget);
  // Off (the code): the prefill decision plus every generated token.
  const EvictionReport off = run(base(), 5, kSteps);
  for (const auto& layer : off.layers)
    for (const auto& h : layer) EXPECT_EQ(h.kept, kBudget + kSteps);
  EXPECT_EQ(off.applications, 1);
}

TEST_F(NaclOptions, DecodeIntervalWithEveryOtherOptionMatchesTheReference) {
  // code_compat at decode time meets KV heads that hold different entries: the scores are matched
  // by original position (an entry the source head no longer holds scores 0).
  constexpr int kSteps = 12, kInterval = 3;
  const std::vector<int> forced(forced_.begin(), forced_.begin() + kSteps);
  reference::NaclDecodeParams p;
  p.v = variant(6);
  p.v.keep_all_proxy = true;
  p.v.code_head_map = true;
  p.proxy = kProxy;
  p.causal = true;
  p.interval = kInterval;
  const Set set = base({{"decode_interval", std::to_string(kInterval)}, {"keep_proxy", "all"},
                        {"gqa_head_map", "code_compat"}, {"proxy_causal", "true"}});
  expect_same(kept(run(set, 6, kSteps)), reference::nacl_with_decode(*model_, tokens_, forced, p), "all options");
}

TEST_F(NaclOptions, EvalSweepPathHonoursTheOptionsAndTheSeed) {
  // evals/engine_evictor.cpp: one full-cache recording, then apply_after_prefill on that cache
  // (the runner uses a restored copy), then the returned observer for the decode steps. Must equal the live run, for two seeds.
  constexpr int kSteps = 8;
  const Set set = base({{"decode_interval", "4"}, {"gqa_head_map", "code_compat"}});
  for (uint64_t seed : {7u, 8u}) {
    auto evictor = evals::make_engine_evictor(seed);
    evals::PolicyChoice choice;
    choice.policy = "nacl";
    choice.label = "nacl";
    choice.params = set;
    evictor->prepare({choice}, *model_);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    decoder->forward(std::span<const int>(tokens_), evictor->start_recording(S()));
    ForwardObserver* observer = evictor->apply(choice, Budget::parse(std::to_string(kBudget)), decoder->cache());
    ASSERT_NE(observer, nullptr) << "decode_interval > 0 needs the decode observer";
    for (int i = 0; i < kSteps; ++i) decoder->forward(std::span<const int>(&forced_.at(i), 1), observer);
    reference::KeptSets got(model_->config.n_layers);
    for (int l = 0; l < model_->config.n_layers; ++l)
      for (int h = 0; h < model_->config.n_kv_heads; ++h) {
        std::vector<int> pos(decoder->cache().positions(l, h), decoder->cache().positions(l, h) + decoder->cache().length(l, h));
        std::sort(pos.begin(), pos.end());
        got[l].push_back(pos);
      }
    expect_same(got, kept(run(set, seed, kSteps)), "sweep path seed " + std::to_string(seed));
  }
  EXPECT_GT(differing_heads(kept(run(base(), 7)), kept(run(base(), 8))), 0) << "the seed does not reach the sampler";
}

TEST_F(NaclOptions, HandPolicyObserveSettingsMatchTheReference) {
  // The engine mechanism without the DSL: PolicyObserve on a hand-written NACL program.
  test::HandPolicy p = test::nacl_policy(kProxy, 4, 8, 0.5, 1.0);
  p.desc.observe.causal = false;
  const auto run_hand = [&](const test::HandPolicy& policy) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(policy, model_->config, {Budget::parse(std::to_string(kBudget)), 9});
    decoder->forward(std::span<const int>(tokens_), &engine);
    return kept(engine.report());
  };
  expect_same(run_hand(p), reference::nacl_variant(*noncausal_, variant(9)), "hand non-causal");
  p.desc.observe.same_index_head = true;
  reference::NaclVariant v = variant(9);
  v.code_head_map = true;
  expect_same(run_hand(p), reference::nacl_variant(*noncausal_, v), "hand same_index_head");
}

TEST(NaclObserve, SameIndexHeadIsTheGroupMapOnMha) {
  ModelConfig c;
  c.name = "mha";
  c.n_layers = 3;
  c.dim = 32;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.hidden_dim = 48;
  c.vocab_size = 300;
  c.context_length = 256;
  const auto model = make_random_model(c, 21);
  std::vector<int> t(120);
  for (int i = 0; i < 120; ++i) t[i] = (i * 37 + 11) % 300;
  const auto run_map = [&](const std::string& map) {
    const auto program = load_policy("nacl", {{"budget_split", "explicit"}, {"explicit_proxy", "0.1"},
                                              {"explicit_sinks", "2"}, {"explicit_protect", "0.05"},
                                              {"gqa_head_map", map}});
    auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*program, c, {Budget::parse("30"), 3});
    decoder->forward(std::span<const int>(t), &engine);
    return engine.report();
  };
  const EvictionReport group = run_map("group"), compat = run_map("code_compat");
  ASSERT_TRUE(group.prefill_evicted);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_EQ(group.layers[l][h].kept_positions, compat.layers[l][h].kept_positions);
}

TEST(NaclObserve, SameIndexHeadWithOtherQueryHeadSignalsIsRejected) {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.dim = 32;
  test::HandPolicy p = test::h2o_policy(4, 0, 0);
  p.desc.window = 4;
  p.desc.observe.same_index_head = true;
  try {
    EvictionEngine engine(p, c, {Budget::parse("10"), 0});
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("same_index_head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
