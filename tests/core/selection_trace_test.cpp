// EngineOptions::trace_selection (engine.h): the report carries, per head, the scores and
// positions the head's latest selection ranked, and the kept entries are that selection's winners.
// bench_gpu_agreement classifies CPU/GPU kept-set differences with it, so a trace that drifted from
// what the engine selected would misclassify silently; these tests tie it to the kept sets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

class SelectionTrace : public test::StoriesPromptTest {
 protected:
  EvictionReport prefill(const std::string& policy_name, bool trace) {
    const auto policy = load_policy(policy_name, {});
    EngineOptions options{Budget::parse("25%"), 0};
    options.trace_selection = trace;
    EvictionEngine engine(*policy, model_->config, options);
    auto decoder = make_decoder(*model_, DecoderDevice::Cpu);
    prefill_prompt(*decoder, tokens_, &engine, &engine);
    return engine.report();
  }
};

TEST_F(SelectionTrace, OffByDefault) {
  const EvictionReport r = prefill("snapkv", false);
  ASSERT_TRUE(r.prefill_evicted);
  for (const auto& layer : r.layers)
    for (const HeadReport& h : layer) EXPECT_TRUE(h.selection_scores.empty() && h.selection_positions.empty());
}

// SnapKV keeps its window and the top-scored rest: every traced entry it dropped scores at most
// the lowest-scored entry it kept outside the window, and every kept position was traced.
TEST_F(SelectionTrace, KeptEntriesAreTheTracedWinners) {
  const EvictionReport r = prefill("snapkv", true);
  ASSERT_TRUE(r.prefill_evicted);
  const int window = 32;  // snapkv.yaml's observation window, protected at the end of the prompt
  int heads = 0;
  for (const auto& layer : r.layers) {
    for (const HeadReport& h : layer) {
      ASSERT_EQ(h.selection_scores.size(), h.selection_positions.size());
      ASSERT_EQ(static_cast<int>(h.selection_positions.size()), S()) << "the prefill selection ranks every entry";
      std::map<int32_t, float> score;
      for (size_t i = 0; i < h.selection_positions.size(); ++i) score[h.selection_positions[i]] = h.selection_scores[i];
      float lowest_kept = INFINITY, highest_dropped = -INFINITY;
      for (const auto& [position, s] : score) {
        const bool kept = std::binary_search(h.kept_positions.begin(), h.kept_positions.end(), position);
        if (kept && position < S() - window) lowest_kept = std::min(lowest_kept, s);
        if (!kept) highest_dropped = std::max(highest_dropped, s);
      }
      for (int32_t p : h.kept_positions) EXPECT_TRUE(score.count(p)) << "kept position " << p << " was not traced";
      EXPECT_LE(highest_dropped, lowest_kept);
      ++heads;
    }
  }
  EXPECT_EQ(heads, model_->config.n_layers * model_->config.n_kv_heads);
}

}  // namespace
}  // namespace kvevict
