// score_at insertion with a decode indicator that scores each entry alone (dsl/entry_locality.h):
// each decode step scores its new entries alone (EvictionEngine::State::score_new_entries), and the
// hidden-state records hold one call's block of one layer (core/engine/model_signals.h). On
// stories260K, kvzap and dms while decoding keep exactly the caches, and give exactly the logits,
// of the same policy whose description says its indicator must see whole heads (the engine's
// other path: every head scored in full at every step, every hidden state recorded). kvzap's kept
// sets against an independent reference are hidden_state_policies_test.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/engine/model_signals.h"
#include "core/engine/policy_with_description.h"
#include "dsl/policy_loader.h"
#include "decode_spy.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

struct DecodeRun {
  std::vector<std::vector<float>> logits;             // per step, the prompt's first
  std::vector<std::vector<std::vector<int32_t>>> kept;  // per step: [layer * n_kv_heads + head]
  EvictionReport report;
};

DecodeRun decode(const Model& model, const std::vector<int>& prompt, const PolicyProgram& policy, int steps) {
  const ModelConfig& c = model.config;
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(policy, c, {Budget::parse("60%"), 0});
  DecodeRun run;
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(prompt), &engine);
  for (int step = 0; step <= steps; ++step) {
    if (step > 0) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
    }
    run.logits.push_back(*logits);
    run.kept.emplace_back();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) run.kept.back().push_back(test::held_positions(decoder->cache(), l, h));
  }
  run.report = engine.report();
  return run;
}

class InsertionScoring : public test::StoriesPromptTest {};

TEST_F(InsertionScoring, DecodeStepsScoreTheirNewEntriesAloneWithTheWholeHeadsResults) {
  const ModelConfig& c = model_->config;
  const int steps = 20;
  for (const char* name : {"kvzap", "dms"}) {
    const auto policy = load_policy(name, {{"sliding_window_size", "16"}, {"decoding", "true"}});
    ASSERT_TRUE(policy->description().decode_scores_each_entry_alone) << name;
    PolicyWithDescription whole_heads(*policy);
    whole_heads.edit().decode_scores_each_entry_alone = false;
    const DecodeRun alone = decode(*model_, tokens_, *policy, steps);
    const DecodeRun whole = decode(*model_, tokens_, whole_heads, steps);
    for (int step = 0; step <= steps; ++step) {
      ASSERT_EQ(alone.kept[step], whole.kept[step]) << name << " step " << step;
      ASSERT_EQ(alone.logits[step].size(), whole.logits[step].size());
      EXPECT_EQ(std::memcmp(alone.logits[step].data(), whole.logits[step].data(), sizeof(float) * alone.logits[step].size()), 0)
          << name << " step " << step;
    }
    bool evicted_while_decoding = false;
    for (int step = 1; step <= steps; ++step) evicted_while_decoding |= alone.kept[step] != alone.kept[step - 1];
    EXPECT_TRUE(evicted_while_decoding) << name << ": no decode step evicted, so the frozen scores were never used";
    EXPECT_EQ(alone.report.new_entries_scored_alone, int64_t{steps} * c.n_layers * c.n_kv_heads) << name;
    EXPECT_EQ(whole.report.new_entries_scored_alone, 0) << name;
  }
}

TEST_F(InsertionScoring, KvzapsHiddenStateRecordsHoldOneCallsBlockOfOneLayer) {
  const ModelConfig& c = model_->config;
  const int steps = 6;
  const auto policy = load_policy("kvzap", {{"sliding_window_size", "16"}, {"decoding", "true"}});
  PolicyWithDescription whole_heads(*policy);
  whole_heads.edit().decode_scores_each_entry_alone = false;
  EXPECT_EQ(decode(*model_, tokens_, *policy, steps).report.hidden_state_floats_peak, int64_t{S()} * c.dim)
      << "the prompt's block of one layer";
  EXPECT_EQ(decode(*model_, tokens_, whole_heads, steps).report.hidden_state_floats_peak,
            int64_t{S() + steps} * c.dim * c.n_layers)
      << "every token of every layer";
  EXPECT_EQ(decode(*model_, tokens_, *load_policy("dms", {{"decoding", "true"}}), 1).report.hidden_state_floats_peak, 0)
      << "dms reads no hidden state";
}

// PositionRecords holding the current call's block alone, without a model: each record replaces
// the one before, reads of it are by original position, and a read of any other layer or
// position is a std::logic_error, not a zero.
TEST(CurrentCallHiddenStates, EachRecordReplacesTheOneBeforeAndOtherReadsAreRefused) {
  PositionRecords rec;
  rec.reset(3, false, false, 2, /*states_of_current_call=*/true);
  std::vector<float> block = {1, 2, 3, 4, 5, 6};  // [3 tokens][2 channels] at positions 10..12
  LayerSignals s;
  s.layer = 1;
  s.first_position = 10;
  s.n_tokens = 3;
  s.hidden_states = block;
  rec.record(s);
  EXPECT_EQ(rec.hidden_state_floats(), 6);
  const std::vector<int32_t> pos = {12, 10};
  std::vector<float> out(4, -1.0f);
  rec.hidden_states(1, pos.data(), 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{5, 1, 6, 2}));
  const std::vector<int32_t> before = {9};
  EXPECT_THROW(rec.hidden_states(1, before.data(), 1, out.data()), std::logic_error);
  EXPECT_THROW(rec.hidden_states(0, pos.data(), 2, out.data()), std::logic_error);
  const std::vector<float> next = {7, 8};  // layer 2, position 13
  s.layer = 2;
  s.first_position = 13;
  s.n_tokens = 1;
  s.hidden_states = next;
  rec.record(s);
  EXPECT_EQ(rec.hidden_state_floats(), 2) << "the block before is gone";
  EXPECT_THROW(rec.hidden_states(1, pos.data(), 2, out.data()), std::logic_error);
  const std::vector<int32_t> p13 = {13};
  rec.hidden_states(2, p13.data(), 1, out.data());
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], 8);
}

}  // namespace
}  // namespace kvevict
