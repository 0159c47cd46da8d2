// The policy files of policies/field/ (docs/POLICIES.md), loaded by name as built-ins, keep exactly
// the tokens of the independent references of reference_field_policies.cpp on stories260K: at
// prefill for the prefill-only methods; at prefill and at every decode step for the methods that
// also evict while generating (a DecodeSpy records what each head held and the query rows before
// the engine acted, and the reference recomputes the decision from those).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/engine/counter_rng.h"
#include "decode_spy.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_field_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

using Params = std::map<std::string, std::string>;
using test::check_decisions;

// A head no decision touched: what it held, ascending.
std::vector<int32_t> unchanged(const reference::CachedHead& b) {
  std::vector<int32_t> p = b.pos;
  std::sort(p.begin(), p.end());
  return p;
}

class FieldPolicies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
    data_ = new reference::PromptData(reference::collect(*model_, tokens_, 16));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete model_;
    data_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  static int S() { return static_cast<int>(tokens_.size()); }

  static EvictionReport prefill(const std::string& name, const Params& params, const std::string& budget) {
    return test::prefill_report(*model_, tokens_, name, params, budget);
  }

  // Kept positions equal the reference's; returns how many heads evicted something.
  static int expect_same(const EvictionReport& got, const reference::KeptSets& want, const std::string& what) {
    return test::expect_same_kept(got, want, S(), what);
  }

  static Model* model_;
  static std::vector<int> tokens_;
  static reference::PromptData* data_;
};

Model* FieldPolicies::model_ = nullptr;
std::vector<int> FieldPolicies::tokens_;
reference::PromptData* FieldPolicies::data_ = nullptr;

// compression_ratio_decoding and prefill_decoding are tested in decode_budget_policies_test.cpp,
// blockpress in block_prefill_test.cpp, chunkkv, chunkpress, entropy_gated_chunkkv and
// noncausal_attn in chunk_policies_test.cpp, the table-driven ones (duo_attention, headkv,
// per_layer_compression, qfilter, rlkv) in table_policies_test.cpp (expected_attention_stats and
// lukv in stats_table_policies_test.cpp), simlayerkv in
// layer_allocation_policies_test.cpp, rkv in pairwise_policies_test.cpp, composed and dms in
// selection_policies_test.cpp, think in channel_policies_test.cpp, defensive_kv in
// rank_policies_test.cpp, kvzap in hidden_state_policies_test.cpp, kvzip in kvzip_policy_test.cpp.
// One name per line.
const std::vector<std::string> kFieldPolicies = {
    "blockpress",
    "cam",
    "cap",
    "chunkkv",
    "chunkpress",
    "compactor",
    "composed",
    "compression_ratio_decoding",
    "cur",
    "d2o",
    "decoding",
    "defensive_kv",
    "dms",
    "duo_attention",
    "entropy_adaptive",
    "entropy_gated_chunkkv",
    "expected_attention",
    "expected_attention_stats",
    "finch",
    "headkv",
    "keydiff",
    "kvmerger",
    "kvzap",
    "kvzip",
    "leverage",
    "look_m",
    "lukv",
    "merging_press",
    "morphkv",
    "noncausal_attn",
    "observed_attention",
    "per_layer_compression",
    "prefill_decoding",
    "qfilter",
    "rkv",
    "rlkv",
    "scissorhands",
    "simlayerkv",
    "think",
};

TEST(FieldPolicyFiles, LoadByNameAndAreListedAsBuiltIns) {
  std::set<std::string> listed;
  for (const PolicyListing& p : list_policies())
    if (p.builtin && p.path.find("/policies/field/") != std::string::npos) listed.insert(p.name);
  for (const std::string& name : kFieldPolicies) {
    EXPECT_TRUE(listed.count(name)) << name << " is not listed as a built-in";
    EXPECT_NO_THROW(load_policy(name)) << name;
    EXPECT_NE(resolve_policy_path(name).find("/policies/field/" + name + ".yaml"), std::string::npos);
  }
  EXPECT_EQ(listed.size(), kFieldPolicies.size()) << "a file in policies/field/ without a test here";
}

TEST_F(FieldPolicies, ObservedAttention) {
  for (int budget : {40, 100})
    EXPECT_GT(expect_same(prefill("observed_attention", {}, std::to_string(budget)),
                          reference::observed_attention(*data_, budget), "observed_attention " + std::to_string(budget)),
              0);
}

// The first policy that reads key vectors (K[d, t], reductions over the channel axis d).
TEST_F(FieldPolicies, KeyDiff) {
  for (int budget : {40, 100})
    for (int sinks : {0, 4}) {
      const std::string what = "keydiff " + std::to_string(budget) + " sinks=" + std::to_string(sinks);
      EXPECT_GT(expect_same(prefill("keydiff", {{"sinks", std::to_string(sinks)}}, std::to_string(budget)),
                            reference::keydiff(*data_, budget, sinks), what),
                0);
    }
  // The anchor matters: ranking by -|k| (Knorm) keeps a different set.
  EXPECT_NE(reference::keydiff(*data_, 40, 0), reference::knorm(*data_, 40));
}

// The merge-on-evict files select as their scorers do (the merge comes after the selection); the
// merged keys and values are checked against reference_merge.cpp in merge_on_evict_test.cpp.
TEST_F(FieldPolicies, MergeOnEvictFilesKeepTheirScorersSets) {
  EXPECT_GT(expect_same(prefill("merging_press", {}, "48"), reference::knorm(*data_, 48), "merging_press"), 0);
  for (const char* name : {"look_m", "kvmerger"})
    EXPECT_GT(expect_same(prefill(name, {}, "48"), reference::snapkv(*data_, 48, {8, 7, true}), name), 0);
}

TEST_F(FieldPolicies, CurBlockNormalisedLeverage) {
  using L = reference::CurParams::Leverage;
  struct Case { Params set; reference::CurParams cp; };
  const std::vector<Case> cases = {
      {{}, {}},                                                                  // CURPress defaults
      {{{"block", "5"}, {"leverage", "kv_avg"}}, {4, 5, L::KvAvg, true}},       // a block that does not divide S
      {{{"leverage", "value"}, {"sinks", "0"}}, {0, 16, L::Value, true}},
      {{{"local", "false"}, {"leverage", "key"}}, {4, 16, L::Key, false}},
  };
  for (const Case& c : cases) {
    std::string what = "cur";
    for (const auto& [k, v] : c.set) what += " " + k + "=" + v;
    EXPECT_GT(expect_same(prefill("cur", c.set, "40"), reference::cur(*data_, 40, c.cp), what), 0);
  }
  // The block normalisation matters here: without it the default ranking differs.
  EXPECT_NE(reference::cur(*data_, 40, {}), reference::cur(*data_, 40, {4, 16, L::KvProduct, false}));
}

TEST_F(FieldPolicies, EntropyAdaptiveSplitsTheBudgetByLayerEntropy) {
  const EvictionReport r = prefill("entropy_adaptive", {}, "48");
  const auto want = reference::entropy_adaptive(*data_, 48, 0.1, 0.7);
  EXPECT_GT(expect_same(r, want, "entropy_adaptive"), 0);
  const auto shares = reference::entropy_adaptive_keep_shares(*data_, 0.1, 0.7);
  std::set<int> budgets;
  for (size_t l = 0; l < want.size(); ++l) {
    budgets.insert(r.layers[l][0].budget);
    EXPECT_GE(shares[l], 0.3 - 1e-12);
    EXPECT_LE(shares[l], 0.9 + 1e-12);
  }
  EXPECT_GT(budgets.size(), 1u) << "every layer got the same budget: the entropy split is not exercised";
  // Narrower bounds move budgets between layers.
  EXPECT_GT(expect_same(prefill("entropy_adaptive", {{"min_ratio", "0.3"}, {"max_ratio", "0.5"}}, "48"),
                        reference::entropy_adaptive(*data_, 48, 0.3, 0.5), "entropy_adaptive 0.3..0.5"),
            0);
}

TEST_F(FieldPolicies, MorphKVAtPrefillAndEveryDecodeStep) {
  const ModelConfig& c = model_->config;
  for (const char* agg : {"sum", "max"}) {
    const auto policy = load_policy("morphkv", {{"window", "16"}, {"aggregation", agg}});
    const bool max_rows = std::string(agg) == "max";
    const int n = check_decisions(*model_, tokens_, *policy, "40", 24, 16,
        [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>& rows, int, int h, int budget, int) {
          return reference::morphkv_keep(b, rows, h, c.group_size(), c.head_dim, budget, 16, max_rows);
        }, std::string("morphkv ") + agg);
    EXPECT_EQ(n, 25 * c.n_layers * c.n_kv_heads) << "every decision (prefill + 24 steps) must evict one or more tokens";
  }
}

TEST_F(FieldPolicies, ScissorhandsTopKAtPrefillAndWhileDecoding) {
  const ModelConfig& c = model_->config;
  struct Case { Params set; int sinks, recent, slack; bool max_group; };
  for (const Case& k : {Case{{{"history_window", "16"}, {"sinks", "4"}, {"recent", "4"}}, 4, 4, 0, false},
                        Case{{{"history_window", "8"}, {"slack", "3"}, {"gqa_agg", "max"}}, 0, 0, 3, true}}) {
    const auto policy = load_policy("scissorhands", k.set);
    const int window = std::stoi(k.set.at("history_window"));
    const int n = check_decisions(*model_, tokens_, *policy, "40", 24, window,
        [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>& rows, int, int h, int budget, int step) {
          if (step > 0 && b.T <= budget + k.slack) return unchanged(b);
          return reference::scissorhands_keep(b, rows, h, c.group_size(), c.head_dim, budget, window, k.sinks, k.recent, k.max_group);
        }, "scissorhands window " + std::to_string(window));
    // Slack 3: the prefill, then every 4th step evicts (the head grows to budget + 4).
    EXPECT_EQ(n, (k.slack == 0 ? 25 : 1 + 24 / (k.slack + 1)) * c.n_layers * c.n_kv_heads);
  }
}

TEST_F(FieldPolicies, ScissorhandsProbabilisticDrawsTheFreeBudgetFromSoftmax) {
  // selection = prob at prefill: every free slot is a draw without replacement from softmax(s / T),
  // here by Gumbel-top-k on the engine's Philox stream (docs/ENGINE.md, Selection): the same draw.
  const ModelConfig& c = model_->config;
  for (uint64_t seed : {1u, 9u}) {
    const auto policy = load_policy("scissorhands", {{"history_window", "16"}, {"selection", "prob"}, {"sinks", "4"},
                                                     {"temperature", "0.05"}});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, c, {Budget::parse("40"), seed});
    test::DecodeSpy spy(engine, c, 16);
    decoder->forward(std::span<const int>(tokens_), &spy);
    int differs_from_topk = 0;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const reference::CachedHead& b = spy.before(l, h);
        const auto topk = reference::scissorhands_keep(b, spy.rows(l), h, c.group_size(), c.head_dim, 40, 16, 4, 0, false);
        // Gumbel keys from the importances: s / T - log(-log u), u keyed by (seed, layer, head, position).
        std::vector<double> imp(b.T, 0.0);
        for (int g = 0; g < c.group_size(); ++g) {
          const std::vector<reference::QueryRow> last(spy.rows(l).end() - 16, spy.rows(l).end());
          for (const auto& row : reference::attention(b, last, h * c.group_size() + g, c.head_dim))
            for (int t = 0; t < b.T; ++t) imp[t] += row[t] / c.group_size();
        }
        std::vector<int> free;
        for (int t = 4; t < b.T; ++t) free.push_back(t);
        std::stable_sort(free.begin(), free.end(), [&](int x, int y) {
          auto key = [&](int t) { return imp[t] / 0.05 - std::log(-std::log(counter_uniform(seed, l, h, b.pos[t], kSamplingStream))); };
          return key(x) > key(y);
        });
        std::vector<int32_t> want = {0, 1, 2, 3};
        for (int i = 0; i < 36; ++i) want.push_back(b.pos[free[i]]);
        std::sort(want.begin(), want.end());
        EXPECT_EQ(test::held_positions(decoder->cache(), l, h), want) << "seed " << seed << " layer " << l << " head " << h;
        differs_from_topk += want != topk;
      }
    EXPECT_GT(differs_from_topk, 0) << "the draw equals the top-k everywhere: the test proves nothing";
  }
}

TEST_F(FieldPolicies, DecodingPressCompressesEveryIntervalOnly) {
  const ModelConfig& c = model_->config;
  for (const char* inner : {"knorm", "streaming_llm"}) {
    const int interval = std::string(inner) == "knorm" ? 4 : 5;
    const auto policy = load_policy("decoding", {{"inner", inner}, {"compression_interval", std::to_string(interval)}});
    const int n = check_decisions(*model_, tokens_, *policy, "40", 20, 1,
        [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>&, int, int, int budget, int step) {
          if (step == 0 || step % interval != 0) return unchanged(b);  // untouched
          return std::string(inner) == "knorm" ? reference::knorm_keep(b, c.head_dim, budget) : reference::streaming_keep(b, budget, 4);
        }, std::string("decoding ") + inner);
    EXPECT_EQ(n, (20 / interval) * c.n_layers * c.n_kv_heads) << inner;
  }
}

}  // namespace
}  // namespace kvevict
