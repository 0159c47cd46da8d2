// The table-driven policies of policies/field/ (duo_attention, rlkv, headkv,
// per_layer_compression, qfilter; lukv and expected_attention_stats: stats_table_policies_test.cpp)
// with their shipped EXAMPLE tables keep exactly the tokens of the
// independent references of reference_table_policies.cpp on stories260K, and their head budgets
// (head_mode / head_weight, core/engine/head_budgets.h) add up exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include <unistd.h>

#include "core/engine/engine.h"
#include "core/util/error.h"
#include "decode_spy.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_table_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

using Params = std::map<std::string, std::string>;

std::string table_path(const std::string& name) {
  return std::string(KVEVICT_TEST_SOURCE_DIR) + "/../policies/field/tables/" + name + ".example.tsv";
}

class TablePolicies : public ::testing::Test {
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

  static int count_full(const std::vector<std::vector<bool>>& full) {
    int n = 0;
    for (const auto& r : full) n += static_cast<int>(std::count(r.begin(), r.end(), true));
    return n;
  }

  // Every layer's heads add up to H x its layer budget, and the layers to L x H x budget.
  static void expect_head_budgets_add_up(const EvictionReport& r, int budget, const std::string& what) {
    int64_t all = 0;
    std::set<int> distinct;
    for (const auto& layer : r.layers)
      for (const HeadReport& h : layer) all += h.budget, distinct.insert(h.budget);
    EXPECT_EQ(all, static_cast<int64_t>(budget) * static_cast<int64_t>(r.layers.size()) * r.layers[0].size()) << what;
    EXPECT_GT(distinct.size(), 2u) << what << ": the head budgets do not differ; the head split is not exercised";
  }

  static Model* model_;
  static std::vector<int> tokens_;
  static reference::PromptData* data_;
};

Model* TablePolicies::model_ = nullptr;
std::vector<int> TablePolicies::tokens_;
reference::PromptData* TablePolicies::data_ = nullptr;

TEST_F(TablePolicies, QFilterScoresKeysAgainstTheTableDirection) {
  const auto filters = reference::read_table(table_path("qfilter"));
  ASSERT_EQ(filters.size(), 20u);
  for (int budget : {20, 40})
    EXPECT_GT(expect_same(prefill("qfilter", {}, std::to_string(budget)), reference::qfilter(*data_, filters, budget),
                          "qfilter " + std::to_string(budget)),
              0);
}

TEST_F(TablePolicies, PerLayerCompressionSplitsByTheRatioTable) {
  const auto ratios = reference::read_table(table_path("per_layer_compression")).at(0);
  const EvictionReport r = prefill("per_layer_compression", {}, "40");
  EXPECT_GT(expect_same(r, reference::per_layer_compression(*data_, ratios, 40), "per_layer_compression"), 0);
  const auto b = reference::per_layer_compression_budgets(*data_, ratios, 40);
  for (size_t l = 0; l < b.size(); ++l) EXPECT_EQ(r.layers[l][0].budget, b[l]) << "layer " << l;
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 40 * static_cast<int>(b.size()));
  EXPECT_NE(b.front(), b.back());
}

TEST_F(TablePolicies, DuoAttentionStreamsTheLowestScoredHeads) {
  ASSERT_GT(S(), 40) << "the test prompt is too short for sinks + recent to evict";
  const auto scores = reference::read_table(table_path("duo_attention"));
  for (double ratio : {0.25, 0.5}) {
    const std::string what = "duo_attention ratio " + std::to_string(ratio);
    const auto full = reference::duo_full_heads(scores, ratio);
    EXPECT_EQ(count_full(full), 20 - static_cast<int>(std::llround(ratio * 20))) << what;
    const EvictionReport r =
        prefill("duo_attention", {{"head_compression_ratio", std::to_string(ratio)}, {"sinks", "4"}, {"recent", "16"}}, "8");
    EXPECT_EQ(expect_same(r, reference::full_or_streaming(*data_, full, 4, 16), what), 20 - count_full(full)) << what;
  }
}

// While decoding, a streaming head stays at its sinks + the newest `recent` positions (a constant
// cache) and a full head keeps every token: checked after every one of 12 greedy steps.
TEST_F(TablePolicies, DuoAttentionStreamingHeadsStayConstantWhileDecoding) {
  const auto full = reference::duo_full_heads(reference::read_table(table_path("duo_attention")), 0.5);
  const auto policy = load_policy("duo_attention", {{"sinks", "4"}, {"recent", "16"}});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, model_->config, {Budget::parse("8"), 0});
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
  for (int step = 1; step <= 12; ++step) {
    const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
    const int n = S() + step;
    for (int l = 0; l < model_->config.n_layers; ++l)
      for (int h = 0; h < model_->config.n_kv_heads; ++h) {
        std::vector<int32_t> want;
        for (int p = 0; p < n; ++p)
          if (full[l][h] || p < 4 || p >= n - 16) want.push_back(p);
        EXPECT_EQ(test::held_positions(decoder->cache(), l, h), want) << "step " << step << " layer " << l << " head " << h;
      }
  }
}

TEST_F(TablePolicies, RlkvKeepsTheReasoningHeadsFull) {
  const auto gates = reference::read_table(table_path("rlkv"));
  const auto full = reference::rlkv_full_heads(gates, 0.25);
  EXPECT_EQ(count_full(full), 5);
  const EvictionReport r = prefill("rlkv", {{"reasoning_share", "0.25"}, {"sinks", "4"}, {"recent", "16"}}, "8");
  EXPECT_EQ(expect_same(r, reference::full_or_streaming(*data_, full, 4, 16), "rlkv"), 15);
}

TEST_F(TablePolicies, HeadKvBudgetsFollowTheHeadScores) {
  const auto scores = reference::read_table(table_path("headkv"));
  const int budget = 40;
  const EvictionReport r = prefill("headkv", {{"beta", "2"}}, std::to_string(budget));
  EXPECT_GT(expect_same(r, reference::headkv(*data_, scores, budget, 8, 7, 2.0), "headkv"), 0);
  const auto b = reference::head_budgets(*data_, reference::headkv_weights(scores, 2.0), budget, 8);
  for (size_t l = 0; l < b.size(); ++l)
    for (size_t h = 0; h < b[l].size(); ++h) EXPECT_EQ(r.layers[l][h].budget, b[l][h]) << "layer " << l << " head " << h;
  expect_head_budgets_add_up(r, budget, "headkv");
}

TEST_F(TablePolicies, ATableOfAnotherShapeIsRefusedWhenTheEngineStarts) {
  // The example tables are shaped for stories260K; a model of another geometry is refused with the
  // policy and the table named (here: the policy compiled, then checked against 6 layers).
  ModelConfig other = model_->config;
  other.n_layers = 6;
  const auto policy = load_policy("qfilter");
  try {
    EvictionEngine engine(*policy, other, {Budget::parse("20"), 0});
    ADD_FAILURE() << "a [5, 4, 8] table was accepted for a 6-layer model";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("policy 'qfilter' ("), std::string::npos) << what;
    EXPECT_NE(what.find("table 'qf' ("), std::string::npos) << what;
    EXPECT_NE(what.find("qfilter.example.tsv) has shape [layer 5, kv_head 4, d 8], but the model has n_layers = 6"),
              std::string::npos)
        << what;
  }
}

// A hand-written program that plans heads and cascades is refused by the engine (the DSL refuses
// such a file at its key, tests/dsl/golden/28_head_mode_cascading.yaml).
class CascadingHeadPlan : public PolicyProgram {
 public:
  explicit CascadingHeadPlan(std::unique_ptr<PolicyProgram> inner) : inner_(std::move(inner)), desc_(inner_->description()) {
    desc_.run.cascading = true;
  }
  const PolicyDescription& description() const override { return desc_; }
  void score(const ScoreInputs& in, bool decoding, float* out) const override { inner_->score(in, decoding, out); }
  double layer_weight(const LayerWeightInputs& in) const override { return inner_->layer_weight(in); }

 private:
  std::unique_ptr<PolicyProgram> inner_;
  PolicyDescription desc_;
};

// The head plans of the built-ins read a table per head and scalars, no signal: the description
// says so (head_plan_reads), so the engine hands them their scalars alone and their scores may
// read signals in place on a device. A head plan that reads a signal is known to.
TEST_F(TablePolicies, HeadPlansSayWhichSignalsTheyRead) {
  for (const char* name : {"headkv", "lukv", "duo_attention", "rlkv"}) {
    const auto policy = load_policy(name);
    const PolicyDescription& d = policy->description();
    ASSERT_TRUE(d.has_head_plan) << name;
    EXPECT_TRUE(d.head_plan_reads_known) << name;
    EXPECT_FALSE(d.head_plan_reads_signals()) << name;
  }
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("kvevict_head_by_norm_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(file);
    out << "name: head_by_norm\nabout: heads weighted by their mean key norm\n"
           "run: {prefill: true, decode_every: 0}\n"
           "score: |\n  score[t] = -key_norm[t]\n"
           "head_weight: |\n  head_weight = mean(t: key_norm[t])\n";
  }
  const auto reading = load_policy(file.string());
  std::filesystem::remove(file);
  const PolicyDescription& d = reading->description();
  EXPECT_TRUE(d.head_plan_reads_signals());
  EXPECT_TRUE(d.head_plan_reads[signal_index(TensorSignal::KeyNorm)]);
  // A description made by hand (not the DSL's) with a head plan is taken to read signals.
  PolicyDescription hand;
  hand.has_head_plan = true;
  EXPECT_TRUE(hand.head_plan_reads_signals());
}

TEST_F(TablePolicies, TheEngineRefusesHeadPlansWithCascading) {
  CascadingHeadPlan policy(load_policy("headkv"));
  ASSERT_TRUE(policy.description().has_head_plan);
  try {
    EvictionEngine engine(policy, model_->config, {Budget::parse("20"), 0});
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "policy headkv: head_mode / head_weight need select scope kv_head, no cascading and no unfold_gqa");
  }
}

}  // namespace
}  // namespace kvevict
