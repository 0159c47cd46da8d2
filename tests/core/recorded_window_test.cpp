// The eval sweep's recorded prefill (evals/engine_evictor.cpp, PrefillRecorder) keeps a window found
// from the prompt's tokens (FinchPress's question after its delimiter) as that window's rows, found
// from the tokens the recording sees, instead of every query of every layer (2.1 GiB at 32K on
// SmolLM2 with any FINCH policy in a sweep); each policy applied from the recording keeps the caches
// of its live run (prefill_prompt with the engine).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/engine/window_observation.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "evals/config.h"
#include "evals/prefill_evictor.h"
#include "prompt_run_checks.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

class RecordedWindowTest : public test::StoriesPromptTest {};

TEST_F(RecordedWindowTest, AWindowFoundFromTheTokensIsRecordedAsThatWindow) {
  // A delimiter whose last occurrence leaves a question of a dozen tokens or so.
  const int delimiter = tokens_[static_cast<size_t>(S() - 12)];
  const int question = window_after_token(tokens_, delimiter);
  ASSERT_GT(question, 0);
  ASSERT_LE(question, 12);
  const std::map<std::string, std::string> finch_params = {{"delimiter", std::to_string(delimiter)}};
  std::vector<evals::PolicyChoice> choices = {{"finch", "finch", finch_params, std::nullopt},
                                              {"snapkv", "snapkv", {{"window", "8"}}, std::nullopt}};
  test::RecordedSweep sweep = test::record_sweep(*model_, choices, tokens_);
  EXPECT_EQ(sweep.asked.window, S()) << "every query is handed over for the call";
  const PrefillRecorder* recorder = sweep.recorder;
  ASSERT_NE(recorder, nullptr);
  for (const PrefillRecorder::Layer& layer : recorder->layers())
    EXPECT_EQ(layer.window, std::max(question, 8)) << "the question's rows and SnapKV's window, not every query";
  test::expect_applied_like_live(sweep, choices, *model_, tokens_, Budget::parse("50%"));
}

// A prompt without the delimiter: FINCH's fallback window, or (fallback 0) its refusal, which the
// recording leaves to the policy's application.
TEST_F(RecordedWindowTest, APromptWithoutTheDelimiterKeepsTheFallbackWindow) {
  int absent = 0;
  while (std::find(tokens_.begin(), tokens_.end(), absent) != tokens_.end()) ++absent;
  const auto finch = load_policy("finch", {{"delimiter", std::to_string(absent)}, {"fallback_window", "5"}});
  EXPECT_EQ(recorded_window_for(*finch, S(), {}, {}, tokens_), 5);
  EXPECT_EQ(recorded_window_for(*finch, S()), S()) << "without the tokens: every query";
  const auto refusing = load_policy("finch", {{"delimiter", std::to_string(absent)}, {"fallback_window", "0"}});
  EXPECT_EQ(recorded_window_for(*refusing, S(), {}, {}, tokens_), 0);
  EXPECT_THROW(make_eviction_plan(*refusing, model_->config, Budget::parse("50%"), S(), tokens_), UsageError);
}

}  // namespace
}  // namespace kvevict
