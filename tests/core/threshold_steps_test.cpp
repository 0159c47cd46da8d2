// Threshold decode steps over frozen scores decided from the entries leaving the recent window
// (core/engine/threshold_steps.h). Without a model: every step of long random runs (appends of 1
// to 3 entries, scores with NaN among them, sinks, windows longer than the head, caps that bind,
// change or fall below the protected entries) keeps what the full rule keeps (select_head with
// threshold_budget, selection.h), or declines where the cap is below the protected entries. On
// stories260K: dms and kvzap while decoding keep the caches and give the logits of the same runs
// made by the full rule at every step (a traced run, which the engine keeps on the full rule), with
// every step after the first decided from the window, whether the cap binds or not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/engine/selection.h"
#include "core/engine/threshold_selection.h"
#include "core/engine/threshold_steps.h"
#include "dsl/policy_loader.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

// One head as the engine holds it: frozen scores and positions in cache order, an edit stamp.
struct Head {
  std::vector<float> scores;
  std::vector<int32_t> positions;
  uint64_t stamp = 1;
  int32_t next_position = 0;
};

// The full rule: select_head with the budget the threshold leaves (the engine's evict_layer).
std::vector<int> full_rule(const Head& h, int first, int recent, double threshold, int cap) {
  HeadSelectionSpec spec;
  spec.budget = threshold_budget(h.scores, h.positions, cap, first, recent, threshold);
  spec.protect_first = first;
  spec.protect_recent = recent;
  return select_head(h.scores, h.positions, spec);
}

void keep(Head& h, const std::vector<int>& kept, uint64_t& stamps) {
  bool moved = kept.size() != h.positions.size();
  for (size_t i = 0; i < kept.size() && !moved; ++i) moved = kept[i] != static_cast<int>(i);
  if (!moved) return;  // the engine edits nothing for such a keep: the stamp stays
  Head next;
  for (int i : kept) {
    next.scores.push_back(h.scores[i]);
    next.positions.push_back(h.positions[i]);
  }
  h.scores = std::move(next.scores);
  h.positions = std::move(next.positions);
  h.stamp = ++stamps;
}

TEST(ThresholdSteps, EveryStepKeepsWhatTheFullRuleKeeps) {
  std::mt19937 rng(5);
  std::normal_distribution<float> score(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t stamps = 1;
  int from_window = 0, evicting = 0, capped = 0, declined = 0, checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int first = static_cast<int>(rng() % 4), recent = static_cast<int>(rng() % 10);
    const double threshold = (rng() % 3) * 0.5 - 0.5;
    // Caps that bind (the pool then ranked), vary from step to step (run.decode_budget, head plans)
    // or fall below the protected entries (the full rule keeps those by priority: declined).
    const int cap_kind = static_cast<int>(rng() % 4);
    const bool coarse = trial % 2 == 1;  // scores in steps of 0.5: ties, broken by position
    Head h;
    auto cap_now = [&](int step) {
      if (cap_kind == 0) return 1000;
      if (cap_kind == 1) return 6 + static_cast<int>(rng() % 20);
      if (cap_kind == 2) return 10 + step / 2;
      return static_cast<int>(rng() % 8);
    };
    const int T0 = static_cast<int>(rng() % 40);
    auto append = [&] {
      h.next_position += 1 + static_cast<int32_t>(rng() % 3);  // gaps, as after a prompt's evictions
      h.positions.push_back(h.next_position - 1);
      const float s = score(rng);
      h.scores.push_back(rng() % 17 == 0 ? nan : coarse ? std::round(2 * s) / 2 : s);
    };
    for (int i = 0; i < T0; ++i) append();
    keep(h, full_rule(h, first, recent, threshold, cap_now(0)), stamps);
    h.stamp = ++stamps;  // a prompt's application: the engine checks the heads afresh
    ThresholdWindowRecord record =
        verify_threshold_head(h.scores, h.positions, h.stamp, first, recent, threshold).value_or(ThresholdWindowRecord{});
    for (int step = 0; step < 40; ++step) {
      const int k = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 3) : 1;
      for (int i = 0; i < k; ++i) append();
      const int cap = cap_now(step);
      const std::vector<int> expected = full_rule(h, first, recent, threshold, cap);
      const bool had_record = record.stamp != 0;
      const std::optional<std::vector<int>> evicted =
          threshold_window_step(h.scores, h.positions, h.stamp, record, first, recent, threshold, cap);
      const int T = static_cast<int>(h.positions.size());
      ++checked;
      if (evicted) {
        ++from_window;
        ASSERT_EQ(kept_without(T, *evicted), expected) << "trial " << trial << " step " << step << " cap " << cap;
        evicting += !evicted->empty();
        capped += record.pool_held;
        keep(h, expected, stamps);
        ASSERT_EQ(record.length, static_cast<int>(h.positions.size()));
        record.stamp = h.stamp;
        continue;
      }
      EXPECT_EQ(record.stamp, 0u) << "a declined record is cleared";
      if (had_record) {  // a record that applied declines only for a cap below the protected entries
        const int protected_count = static_cast<int>(protected_indices(h.positions, first, recent).size());
        EXPECT_LT(cap, protected_count) << "trial " << trial << " step " << step;
        ++declined;
      }
      keep(h, expected, stamps);
      record = verify_threshold_head(h.scores, h.positions, h.stamp, first, recent, threshold)
                   .value_or(ThresholdWindowRecord{});
    }
  }
  EXPECT_GT(from_window, checked * 3 / 4) << "most steps are decided from the window";
  EXPECT_GT(evicting, 1000) << "many of them evict";
  EXPECT_GT(capped, 1000) << "many with the cap binding (the ranked pool)";
  EXPECT_GT(declined, 10) << "caps below the protected entries are covered";
}

TEST(ThresholdSteps, RecordsAreOnlyMadeAndUsedWhereTheyHold) {
  const std::vector<float> scores = {5, 5, 1, 2, 0, 9};
  const std::vector<int32_t> positions = {0, 1, 4, 5, 6, 7};
  // Sinks [0, 2), recent 2: unprotected entries 2 and 3 pass a threshold of 1.
  const auto record = verify_threshold_head(scores, positions, 7, 2, 2, 1.0);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->sinks, 2);
  EXPECT_EQ(record->length, 6);
  EXPECT_FALSE(verify_threshold_head(scores, positions, 7, 2, 2, 1.5)) << "entry 2 fails 1.5";
  EXPECT_FALSE(verify_threshold_head(scores, positions, 7, 2, 1, 1.0)) << "entry 4 unprotected and failing";
  const std::vector<int32_t> shuffled = {0, 1, 5, 4, 6, 7};
  EXPECT_FALSE(verify_threshold_head(scores, shuffled, 7, 2, 2, 1.0)) << "positions not increasing";
  std::vector<float> with_nan = scores;
  with_nan[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(verify_threshold_head(with_nan, positions, 7, 2, 2, 1.0)) << "a NaN never passes";

  // One appended entry: entry 4 (score 0) leaves the window and fails; entry 5 is still recent.
  std::vector<float> s2 = scores;
  std::vector<int32_t> p2 = positions;
  s2.push_back(3);
  p2.push_back(9);
  ThresholdWindowRecord r = *record;
  const auto step = threshold_window_step(s2, p2, 7, r, 2, 2, 1.0, 100);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, std::vector<int>({4}));
  EXPECT_EQ(r.length, 6);
  EXPECT_FALSE(r.pool_held) << "no cap bound";
  // A cap of 5: entry 4 fails, and of the unprotected 2 (score 1) and 3 (score 2), 2 ranks last.
  r = *record;
  const auto capped = threshold_window_step(s2, p2, 7, r, 2, 2, 1.0, 5);
  ASSERT_TRUE(capped.has_value());
  EXPECT_EQ(*capped, std::vector<int>({2, 4}));
  EXPECT_TRUE(r.pool_held);
  EXPECT_EQ(r.pool.size(), 1u) << "entry 3 left in the pool";
  auto declines = [&](std::span<const float> sc, std::span<const int32_t> pos, uint64_t stamp, int recent, int cap) {
    ThresholdWindowRecord copy = *record;
    const bool declined = !threshold_window_step(sc, pos, stamp, copy, 2, recent, 1.0, cap).has_value();
    return declined && copy.stamp == 0;
  };
  EXPECT_TRUE(declines(s2, p2, 8, 2, 100)) << "another stamp";
  EXPECT_TRUE(declines(s2, p2, 7, 3, 100)) << "another protection";
  EXPECT_TRUE(declines(s2, p2, 7, 2, 3)) << "a cap of 3 below the 4 protected entries";
  p2.back() = 7;
  EXPECT_TRUE(declines(s2, p2, 7, 2, 100)) << "appended position not after the last";
  EXPECT_TRUE(declines(std::span<const float>(scores).first(5), std::span<const int32_t>(positions).first(5), 7, 2, 100))
      << "fewer entries than recorded";
  ThresholdWindowRecord none;
  EXPECT_FALSE(threshold_window_step(scores, positions, 7, none, 2, 2, 1.0, 100)) << "no record";
  EXPECT_EQ(kept_without(5, std::vector<int>({1, 3})), std::vector<int>({0, 2, 4}));
  EXPECT_THROW(kept_without(5, std::vector<int>({3, 1})), std::invalid_argument);
}

class ThresholdWindowSteps : public test::StoriesPromptTest {};

// The engine keeps a traced run (EngineOptions::trace_selection) on the full rule at every step:
// the control the window's decisions must match.
TEST_F(ThresholdWindowSteps, DmsAndKvzapKeepTheFullRulesCachesAndLogits) {
  const ModelConfig& c = model_->config;
  const int steps = 24;
  struct Run {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<std::vector<int32_t>>> kept;  // per step, [layer][head] in cache order
    EvictionReport report;
  };
  auto run = [&](const PolicyProgram& policy, const std::string& budget, bool traced) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EngineOptions options{Budget::parse(budget), 0};
    options.trace_selection = traced;
    EvictionEngine engine(policy, c, options);
    Run r;
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
    for (int step = 0; step <= steps; ++step) {
      if (step > 0) {
        const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
        logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
      }
      r.logits.push_back(*logits);
      r.kept.emplace_back();
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const int32_t* p = decoder->cache().positions(l, h);
          r.kept.back().emplace_back(p, p + decoder->cache().length(l, h));
        }
    }
    r.report = engine.report();
    return r;
  };
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  struct Case {
    const char* policy;
    const char* threshold;
    const char* budget;
  };
  // At 100% heads whose entries all pass reach the cap as they grow (the ranked pool); at 40% most do.
  for (const Case& k : {Case{"dms", "-13", "100%"}, Case{"kvzap", "-1.0", "100%"}, Case{"dms", "-13", "40%"},
                        Case{"kvzap", "-1.0", "40%"}}) {
    const auto policy =
        load_policy(k.policy, {{"sliding_window_size", "8"}, {"decoding", "true"}, {"threshold", k.threshold}});
    const Run window = run(*policy, k.budget, false);
    const Run full = run(*policy, k.budget, true);
    for (int step = 0; step <= steps; ++step) {
      ASSERT_EQ(window.kept[step], full.kept[step]) << k.policy << " at " << k.budget << ", step " << step;
      ASSERT_EQ(std::memcmp(window.logits[step].data(), full.logits[step].data(), sizeof(float) * window.logits[step].size()),
                0)
          << k.policy << " step " << step;
    }
    bool evicted = false;
    for (int step = 1; step <= steps; ++step) evicted |= window.kept[step] != window.kept[step - 1];
    EXPECT_TRUE(evicted) << k.policy << ": no decode step evicted";
    EXPECT_EQ(full.report.threshold_window_steps, 0) << "the traced control ran the full rule";
    // Every step after the first (whose records the prompt's application left unchecked).
    EXPECT_EQ(window.report.threshold_window_steps, (steps - 1) * heads) << k.policy << " at " << k.budget;
  }
}

}  // namespace
}  // namespace kvevict
