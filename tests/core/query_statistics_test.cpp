// The prompt query statistics a decoder hands over per block (core/decode/query_statistics_block.h):
// the host's rule, blocks merged in any split, the device's chunked algorithm on the CPU (the twin),
// and the engine reading them instead of every prompt query: ExpectedAttention, LU-KV and CAP keep
// the caches they kept from the rows, with the CPU decoder's statistics and with the twin's, and
// planted statistics change them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/query_statistics_block.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "evals/config.h"
#include "evals/prefill_evictor.h"
#include "query_statistics_checks.h"
#include "prompt_run_checks.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

using test::expect_close;

ModelConfig small_config(int head_dim, RopeStyle style) {
  ModelConfig c;
  c.dim = 4 * head_dim;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = head_dim;
  c.rope_style = style;
  return c;
}

// Query rows [n][n_heads][head_dim] around a per-channel offset, so that the means are far from 0.
std::vector<float> random_rows(int n, int n_heads, int head_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> rows(static_cast<size_t>(n) * n_heads * head_dim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = noise(rng) + static_cast<float>(i % (n_heads * head_dim)) * 0.25f;
  return rows;
}


TEST(QueryStatisticsBlock, BlocksMergedInAnySplitGiveTheWholeBlock) {
  for (const RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    const ModelConfig config = small_config(8, style);
    const Rope rope(config);
    const int n = 300, first = 5;
    const std::vector<float> rows = random_rows(n, config.n_heads, config.head_dim, 11);
    const size_t row = static_cast<size_t>(config.n_heads) * config.head_dim;
    for (const bool covariance : {false, true}) {
      const QueryStatisticsRequest request{true, 9, covariance};
      const BlockQueryStatistics whole =
          block_query_statistics(rows.data(), n, first, request, config.n_heads, config.head_dim, rope);
      EXPECT_EQ(whole.count, n - 4) << "positions 5..8 are before `from`";
      std::mt19937 rng(7);
      for (int trial = 0; trial < 5; ++trial) {
        BlockQueryStatistics merged = empty_query_statistics(request, config.n_heads, config.head_dim);
        for (int b0 = 0; b0 < n;) {
          const int len = std::min(n - b0, 1 + static_cast<int>(rng() % 80));
          merge_query_statistics(merged, block_query_statistics(rows.data() + b0 * row, len, first + b0, request,
                                                                config.n_heads, config.head_dim, rope));
          b0 += len;
        }
        EXPECT_EQ(merged.count, whole.count);
        expect_close(merged.mean, whole.mean, 1e-13, "mean");
        expect_close(merged.m2, whole.m2, 1e-12, "m2");
      }
    }
  }
}

// The twin (the device's chunks, its RoPE expression from the decoder's table) against the host's
// whole-block rule: the rotations round differently in f32, so to 1e-6 of the scale; every chunk
// length gives the same count.
TEST(QueryStatisticsBlock, TheTwinsChunksAgreeWithTheHost) {
  for (const RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    const ModelConfig config = small_config(16, style);
    Rope rope(config);
    const int n = 257, first = 40;
    rope.reserve(first + n);
    const std::vector<float> rows = random_rows(n, config.n_heads, config.head_dim, 5);
    for (const int from : {0, 41, 100, 296, 297, 400}) {
      const QueryStatisticsRequest request{true, from, true};
      const BlockQueryStatistics host =
          block_query_statistics(rows.data(), n, first, request, config.n_heads, config.head_dim, rope);
      EXPECT_EQ(host.count, std::clamp(first + n - from, 0, n)) << from;
      for (const int chunk : {1, 3, 64, 256, 5000}) {
        const BlockQueryStatistics twin =
            query_statistics_twin(rows.data(), n, first, request, config.n_heads, config.head_dim, rope.table(), chunk);
        EXPECT_EQ(twin.count, host.count) << from << " " << chunk;
        expect_close(twin.mean, host.mean, 1e-6, "mean, chunk " + std::to_string(chunk));
        expect_close(twin.m2, host.m2, 1e-6, "m2, chunk " + std::to_string(chunk));
      }
    }
    // A table that does not reach the rows is refused, not read past.
    Rope short_rope(config);
    short_rope.reserve(first + n - 1);
    EXPECT_THROW(query_statistics_twin(rows.data(), n, first, {true, 0, true}, config.n_heads, config.head_dim,
                                       short_rope.table(), 64),
                 std::invalid_argument);
  }
}

TEST(QueryStatisticsBlock, MergeRefusesAnotherSettingOrShape) {
  const BlockQueryStatistics a = empty_query_statistics({true, 4, true}, 4, 8);
  BlockQueryStatistics into = a;
  EXPECT_THROW(merge_query_statistics(into, empty_query_statistics({true, 0, true}, 4, 8)), std::invalid_argument);
  EXPECT_THROW(merge_query_statistics(into, empty_query_statistics({true, 4, false}, 4, 8)), std::invalid_argument);
  EXPECT_THROW(merge_query_statistics(into, empty_query_statistics({true, 4, true}, 2, 8)), std::invalid_argument);
  BlockQueryStatistics bad = a;
  bad.count = 3;
  bad.mean.pop_back();
  EXPECT_THROW(merge_query_statistics(into, bad), std::invalid_argument);
  merge_query_statistics(into, a);  // a block of no row changes nothing
  EXPECT_EQ(into.count, 0);
}

// Between a CPU decoder and the engine: asks the decoder for every query of the prompt instead of
// its statistics, and hands the engine either those rows (the engine's own rule, as before the
// decoder made the statistics), the twin's statistics of them (what the CUDA decoder hands over),
// or the twin's with every mean negated (the control).
enum class StatisticsSource { Rows, Twin, PlantedTwin };
class StatisticsFromRows final : public ForwardObserver {
 public:
  StatisticsFromRows(EvictionEngine& engine, const ModelConfig& config, StatisticsSource source)
      : engine_(engine), config_(config), rope_(config), source_(source) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine_.request();
    asked_ = r.query_statistics;
    if (asked_.enabled) {
      r.window = config_.context_length;
      r.query_statistics = {};
    }
    return r;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    if (!asked_.enabled || source_ == StatisticsSource::Rows) return engine_.after_layer(signals, cache);
    if (signals.window != signals.n_tokens) throw std::logic_error("the decoder handed too few queries");
    rope_.reserve(signals.first_position + signals.n_tokens);
    held_ = query_statistics_twin(signals.window_queries.data(), signals.n_tokens, signals.first_position, asked_,
                                  config_.n_heads, config_.head_dim, rope_.table(), 7);
    if (source_ == StatisticsSource::PlantedTwin)
      for (double& m : held_.mean) m = -m;
    LayerSignals with = signals;
    with.query_statistics = &held_;
    ++handed;
    engine_.after_layer(with, cache);
  }
  void after_forward(int n_tokens, KVCache& cache) override { engine_.after_forward(n_tokens, cache); }
  int handed = 0;

 private:
  EvictionEngine& engine_;
  const ModelConfig& config_;
  Rope rope_;
  StatisticsSource source_;
  mutable QueryStatisticsRequest asked_;
  BlockQueryStatistics held_;
};

class QueryStatisticsEngineTest : public test::StoriesPromptTest {
 protected:
  using Positions = test::CacheLayout;  // [layer][head][entry]
  // The cache's positions after the prompt, with the decoder's statistics (no source) or `source`'s.
  static Positions prompt_positions(const PolicyProgram& policy, const StatisticsSource* source,
                                    int* handed = nullptr) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(policy, model_->config, EngineOptions{Budget::parse("40"), 3});
    if (source) {
      StatisticsFromRows observer(engine, model_->config, *source);
      prefill_prompt(*decoder, tokens_, &engine, &observer);
      if (handed) *handed = observer.handed;
    } else {
      EXPECT_TRUE(engine.request().query_statistics.enabled);
      prefill_prompt(*decoder, tokens_, &engine, &engine);
    }
    return test::cache_layout_of(decoder->cache());
  }
};

TEST_F(QueryStatisticsEngineTest, StatisticsFromTheDecoderKeepTheCachesOfTheRows) {
  for (const char* name : {"expected_attention", "lukv", "cap"}) {
    const auto policy = load_policy(name, {});
    const StatisticsSource rows = StatisticsSource::Rows, twin = StatisticsSource::Twin,
                           planted = StatisticsSource::PlantedTwin;
    const Positions from_rows = prompt_positions(*policy, &rows);
    ASSERT_LT(from_rows[0][0].size(), static_cast<size_t>(S())) << name << " evicted nothing";
    // The CPU decoder's statistics are the engine's own rule on the same rows: the same bits.
    EXPECT_EQ(prompt_positions(*policy, nullptr), from_rows) << name;
    int handed = 0;
    EXPECT_EQ(prompt_positions(*policy, &twin, &handed), from_rows) << name << ": the twin's chunks";
    EXPECT_EQ(handed, model_->config.n_layers) << name;
    EXPECT_NE(prompt_positions(*policy, &planted), from_rows) << name << ": the planted statistics were not read";
  }
}

// A prompt nobody announced after decode steps is taken for a decode call, so the decoder is asked
// for no statistics: every query of each call is asked for instead, and the engine sums the
// prompt's itself (it refused such a prompt before). The same caches as the policy's first prompt.
TEST_F(QueryStatisticsEngineTest, AnUnannouncedLaterPromptMakesItsStatisticsFromEveryQuery) {
  for (const char* name : {"expected_attention", "cap"}) {
    const auto policy = load_policy(name, {});
    const test::LaterPrompt later = test::later_prompt_layout(*model_, *policy, tokens_, Budget::parse("40"));
    EXPECT_FALSE(later.asked.query_statistics.enabled) << name;
    EXPECT_EQ(later.asked.window, model_->config.context_length) << name;
    EXPECT_EQ(later.layout, prompt_positions(*policy, nullptr)) << name;
  }
}

// The eval sweep's path (evals/engine_evictor.cpp): one recorded full-cache prefill, then each
// policy applied from it. When the sweep's policies that read the statistics count from one
// position, the recorder keeps the decoder's statistics instead of every query (its window is the
// policies' own, not the prompt), and each policy keeps the caches of the live run; CAP, which
// reads no Q_cov, takes the recorded means alone. With a policy counting from another position the
// recorder makes each position's statistics by the host rule from every query, which the decoder
// hands over for the call, and still keeps only the policies' windows of queries; each policy takes
// its own position's and keeps the caches of its live run.
TEST_F(QueryStatisticsEngineTest, TheSweepRecordsTheStatisticsInsteadOfEveryQuery) {
  std::vector<evals::PolicyChoice> choices;
  for (const char* name : {"expected_attention", "cap"}) choices.push_back({name, name, {}, std::nullopt});
  test::RecordedSweep sweep = test::record_sweep(*model_, choices, tokens_);
  const ObservationRequest& asked = sweep.asked;
  EXPECT_TRUE(asked.query_statistics.enabled);
  EXPECT_EQ(asked.query_statistics.from, 4);
  EXPECT_TRUE(asked.query_statistics.covariance) << "expected_attention reads Q_cov";
  EXPECT_LT(asked.window, S()) << "no longer every query";
  test::expect_applied_like_live(sweep, choices, *model_, tokens_, Budget::parse("40"));
  choices.push_back({"expected_attention", "from_two", {{"n_sink", "2"}}, std::nullopt});
  test::RecordedSweep mixed = test::record_sweep(*model_, choices, tokens_);
  EXPECT_FALSE(mixed.asked.query_statistics.enabled);
  EXPECT_EQ(mixed.asked.window, S()) << "every query handed over for the call";
  ASSERT_NE(mixed.recorder, nullptr);
  ASSERT_EQ(mixed.recorder->statistics_requests().size(), 2u);
  EXPECT_EQ(mixed.recorder->statistics_requests()[0].from, 2);
  EXPECT_EQ(mixed.recorder->statistics_requests()[1].from, 4);
  for (const PrefillRecorder::Layer& layer : mixed.recorder->layers()) {
    EXPECT_LT(layer.window, S()) << "every query kept";
    ASSERT_EQ(layer.query_statistics.size(), 2u);
    EXPECT_EQ(layer.query_statistics[0].count, S() - 2);
    EXPECT_EQ(layer.query_statistics[1].count, S() - 4);
  }
  test::expect_applied_like_live(mixed, choices, *model_, tokens_, Budget::parse("40"));
}

}  // namespace
}  // namespace kvevict
