// Decode-phase budgets and protected sets (run.decode_budget, protect.decode_first/decode_recent) and
// the two field files that need them, against independent references on stories260K:
//   compression_ratio_decoding: no prefill eviction; at every compression_interval-th step each
//     head keeps max(1, floor(tokens_seen * (1 - r))) tokens by Knorm (or StreamingLLM);
//   prefill_decoding: SnapKV at the prefill to --budget with its window protected, then Knorm to
//     target_size with nothing protected, every compression_interval steps.
// The references compute the budgets from the rule, not from the engine's report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/util/error.h"
#include "decode_spy.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "reference_field_policies.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

using test::check_decisions;

std::vector<int32_t> unchanged(const reference::CachedHead& b) {
  std::vector<int32_t> p = b.pos;
  std::sort(p.begin(), p.end());
  return p;
}

class DecodeBudgetPolicies : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = load_model(test::stories_checkpoint());
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
  }
  int S() const { return static_cast<int>(tokens_.size()); }
  std::unique_ptr<Model> model_;
  std::vector<int> tokens_;
};

TEST_F(DecodeBudgetPolicies, CompressionRatioDecodingKeepsAShareOfTheTokensSeen) {
  const ModelConfig& c = model_->config;
  struct Case { const char* inner; double ratio; int interval; };
  for (const Case& k : {Case{"knorm", 0.5, 4}, Case{"streaming_llm", 0.3, 5}}) {
    const auto policy = load_policy("compression_ratio_decoding", {{"inner", k.inner},
                                                                   {"target_compression_ratio", std::to_string(k.ratio)},
                                                                   {"compression_interval", std::to_string(k.interval)}});
    std::set<int> targets;
    const int n = check_decisions(*model_, tokens_, *policy, "full", 20, 1,
        [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>&, int, int, int, int step) {
          if (step == 0 || step % k.interval != 0) return unchanged(b);
          const int seen = S() + step;  // one token per forward after the prompt
          const int target = std::max(1, static_cast<int>(std::floor(seen * (1 - k.ratio))));
          targets.insert(target);
          return std::string(k.inner) == "knorm" ? reference::knorm_keep(b, c.head_dim, target)
                                                 : reference::streaming_keep(b, target, 4);
        }, std::string("compression_ratio_decoding ") + k.inner);
    EXPECT_EQ(n, (20 / k.interval) * c.n_layers * c.n_kv_heads) << "every compression must evict: " << k.inner;
    EXPECT_GT(targets.size(), 1u) << "the target must grow with the tokens seen";
  }
}

TEST_F(DecodeBudgetPolicies, PrefillDecodingUsesEachPhasesBudgetAndProtectedSet) {
  const ModelConfig& c = model_->config;
  const int window = 16, target = 30, interval = 3;
  const reference::PromptData data = reference::collect(*model_, tokens_, window);
  const reference::KeptSets prefill_kept = reference::snapkv(data, 40, {window, 5, false});
  const auto policy = load_policy("prefill_decoding", {{"window", std::to_string(window)},
                                                       {"target_size", std::to_string(target)},
                                                       {"compression_interval", std::to_string(interval)}});
  int protected_window_evicted = 0;
  const int n = check_decisions(*model_, tokens_, *policy, "40", 12, window,
      [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>&, int l, int h, int, int step) {
        if (step == 0) return std::vector<int32_t>(prefill_kept[l][h].begin(), prefill_kept[l][h].end());
        if (step % interval != 0 || b.T <= target) return unchanged(b);
        auto kept = reference::knorm_keep(b, c.head_dim, target);  // nothing protected while decoding
        const int32_t newest = *std::max_element(b.pos.begin(), b.pos.end());
        protected_window_evicted += std::find(kept.begin(), kept.end(), newest) == kept.end();
        return kept;
      }, "prefill_decoding");
  EXPECT_GT(n, c.n_layers * c.n_kv_heads) << "the prefill and at least one decode compression must evict";
  EXPECT_GT(protected_window_evicted, 0) << "no decode decision dropped the newest token: decode_recent 0 is not exercised";
}

TEST(DecodeBudgetSettings, InputsAndErrorsAreChecked) {
  const std::string head = "name: p\nabout: x\nscore: |\n  score[t] = pos[t]\n";
  // decode_step and budget exist only in run.decode_budget.
  try {
    dsl::compile_policy_text("p.yaml", head + "protect: {first: decode_step}\n");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:5:18: error: 'decode_step' is not available in a setting; settings may "
                                         "use parameters and prompt_len"),
              std::string::npos)
        << e.what();
  }
  try {
    dsl::compile_policy_text("p.yaml", head + "run: {decode_every: 1, decode_budget: key_norm}\n");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:5:39: error: 'key_norm' is a tensor signal"), std::string::npos) << e.what();
  }
  // Decode-phase settings without a decode trigger would be ignored: errors at their keys.
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {"run: {decode_budget: 10}\n", "p.yaml:5:22: error: 'decode_budget' is read only while decoding; set 'decode_every: N' too"},
           {"protect: {decode_recent: 2}\n", "p.yaml:5:26: error: 'decode_recent' is read only while decoding; set run.decode_every too"}}) {
    try {
      dsl::compile_policy_text("p.yaml", head + extra);
      ADD_FAILURE() << "accepted: " << extra;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  const auto ok = dsl::compile_policy_text(
      "p.yaml", head + "run: {decode_every: 1, decode_budget: \"budget + decode_step / 2 + prompt_len * 0\"}\n"
                       "protect: {recent: 4, decode_recent: 1}\n");
  EXPECT_TRUE(ok.desc.run.has_decode_budget);
  EXPECT_DOUBLE_EQ(dsl::evaluate_decode_budget(ok.decode_budget, 100, 6, 40), 43);
  EXPECT_EQ(ok.desc.protect.decode_recent, 1);
  EXPECT_EQ(ok.desc.protect.decode_first, -1);  // as at prefill
}

TEST_F(DecodeBudgetPolicies, ANegativeDecodeBudgetIsAUsageErrorNamingThePolicy) {
  const auto compiled = dsl::compile_policy_text(
      "neg.yaml", "name: neg\nabout: x\nscore: |\n  score[t] = pos[t]\nrun: {prefill: false, decode_every: 1, decode_budget: \"20 - decode_step * 10\"}\n");
  dsl::InterpretedPolicy policy(compiled);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine engine(policy, model_->config, {Budget::parse("full"), 0});
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
  for (int step = 1; step <= 2; ++step) {
    const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    logits = &decoder->forward(std::span<const int>(&next, 1), &engine);  // budgets 10, then 0
  }
  const int next = 1;
  try {
    decoder->forward(std::span<const int>(&next, 1), &engine);
    FAIL() << "a budget of -10 tokens was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("policy neg: run.decode_budget is -10"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
