// kept_order for every policy (spec §8 "kept_order (all policies)", §2.10 item 5): each built-in
// policy accepts --set kept_order=positional|score and records it; with score the cache holds the
// survivors in top-k rank order, which this test recomputes directly for K-norm (score = -|k|,
// computed here from the cached keys) on real stories260K keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "test_models.h"

namespace kvevict {
namespace {

TEST(KeptOrder, EveryBuiltInPolicyAcceptsAndRecordsIt) {
  int n = 0;
  for (const PolicyListing& p : list_policies()) {
    if (!p.builtin) continue;
    ++n;
    const auto has = std::any_of(p.params.begin(), p.params.end(), [](const PolicyParamInfo& i) {
      return i.name == "kept_order" && i.type == "enum" && (i.range == "positional|score" || i.range == "score|positional") &&
             !i.doc.empty();
    });
    EXPECT_TRUE(has) << p.name << " lists no documented kept_order parameter";
    for (const char* order : {"positional", "score"}) {
      const auto program = load_policy(p.name, {{"kept_order", order}});
      EXPECT_EQ(mode_name(program->description().select.kept_order), order) << p.name;
      EXPECT_EQ(program->description().params.at("kept_order"), order) << p.name;
    }
    EXPECT_THROW(load_policy(p.name, {{"kept_order", "random"}}), UsageError) << p.name;
  }
  EXPECT_GE(n, 12);
  // Defaults follow each file: CAKE's code keeps score order; the others are positional.
  EXPECT_EQ(load_policy("cake")->description().select.kept_order, KeptOrder::Score);
  EXPECT_EQ(load_policy("nacl")->description().select.kept_order, KeptOrder::Positional);
  EXPECT_EQ(load_policy("knorm")->description().params.at("kept_order"), "positional");
}

TEST(KeptOrder, ScoreOrderIsTheTopKRankOfTheScoreComputedDirectly) {
  if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  auto model = load_model(test::stories_checkpoint());
  const ModelConfig& c = model->config;
  const std::vector<int> prompt = model->tokenizer->encode(test::kPolicyTestStory, true);
  const int S = static_cast<int>(prompt.size()), budget = 40;
  // The full cache's keys, to rank directly.
  auto full = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  full->forward(std::span<const int>(prompt));
  for (const char* order : {"positional", "score"}) {
    const auto policy = load_policy("knorm", {{"kept_order", order}});
    auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, c, {Budget::parse(std::to_string(budget)), 0});
    decoder->forward(std::span<const int>(prompt), &engine);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<double> score(S);
        for (int t = 0; t < S; ++t) {
          double q = 0;
          for (int e = 0; e < c.head_dim; ++e) {
            const double k = full->cache().keys(l, h)[static_cast<size_t>(t) * c.head_dim + e];
            q += k * k;
          }
          score[t] = -static_cast<double>(static_cast<float>(std::sqrt(q)));  // the engine's float norm
        }
        std::vector<int32_t> rank(S);
        for (int t = 0; t < S; ++t) rank[t] = t;
        std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return score[a] > score[b]; });
        rank.resize(budget);
        std::vector<int32_t> want = rank;
        if (std::string(order) == "positional") std::sort(want.begin(), want.end());
        else ASSERT_FALSE(std::is_sorted(want.begin(), want.end())) << "rank order is ascending: the test proves nothing";
        const std::vector<int32_t> got(decoder->cache().positions(l, h), decoder->cache().positions(l, h) + budget);
        ASSERT_EQ(decoder->cache().length(l, h), budget);
        EXPECT_EQ(got, want) << order << " layer " << l << " head " << h;
      }
  }
}

}  // namespace
}  // namespace kvevict
