// The engine takes the prompt's segment-local attention A_seg from the decoder
// (ObservationRequest::segment_attention, LayerSignals::segment_attention; core/decode/
// segment_attention_block.h) instead of every query of the prompt (a 2 GiB download per layer at
// 128K on the 8B geometry where the decoder runs on a device). CPU proof, on stories260K with
// ChunkPress, NonCausalAttnPress and Compactor at short segments:
//   * the CPU decoder's A_seg (the host rule) keeps exactly the caches and logits of the engine's
//     own computation from every query (the way before), which the engine still takes where the
//     decoder hands none but every query;
//   * the device's algorithm (segment_attention_twin over a device-layout copy of the cache)
//     handed instead keeps the same caches, and a planted wrong A_seg changes them (it is read);
//   * the engine asks for no query beyond its window in the prompt's call, and refuses a prompt
//     layer that comes with neither A_seg nor every query (std::logic_error) instead of scoring 0.
// The GPU tests (segment_attention_gpu_test.cpp) hold the CUDA runner to the twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache_row_reads_harness.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/segment_attention_block.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "evals/config.h"
#include "evals/prefill_evictor.h"
#include "prompt_run_checks.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

enum class Hand {
  Decoder,  // the CPU decoder's own (the host rule)
  Rows,     // none: every query of the prompt instead, the engine computes A_seg itself
  Twin,     // the device's algorithm over a copy of the layer
  Planted,  // the twin's, each head's entries reversed
  Nothing,  // neither A_seg nor every query
};

// Wraps the engine: asks what it asks, plus every query of a prompt call where it needs them to
// make A_seg itself (twin, planted) or to hand them to the engine (rows), and hands the engine the
// window it asked for with the A_seg `hand` says.
class SegmentHandOver : public ForwardObserver {
 public:
  SegmentHandOver(EvictionEngine& engine, const ModelConfig& config, Hand hand)
      : engine_(engine), config_(config), hand_(hand) {}
  ObservationRequest request() const override {
    asked_ = engine_.request();
    ObservationRequest r = asked_;
    if (asked_.segment_attention.enabled() && hand_ != Hand::Decoder) {
      if (hand_ != Hand::Nothing) r.window = config_.context_length;
      r.segment_attention = {};
    }
    return r;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    LayerSignals s = signals;
    if (asked_.segment_attention.enabled() && signals.first_position == 0) {
      widest_asked = std::max(widest_asked, asked_.window);
      if (hand_ == Hand::Decoder) handed += signals.segment_attention != nullptr;
      if (hand_ == Hand::Twin || hand_ == Hand::Planted) {
        held_ = twin_of(cache, signals);
        if (hand_ == Hand::Planted)
          for (int h = 0; h < held_.n_heads; ++h)
            std::reverse(held_.values.begin() + size_t(h) * held_.length, held_.values.begin() + size_t(h + 1) * held_.length);
        s.segment_attention = &held_;
        ++handed;
      }
      // The window the engine asked for: the block's newest rows (every one for `Rows`).
      if (hand_ != Hand::Rows) {
        const int w = std::min(asked_.window, signals.n_tokens);
        const size_t row = signals.window_queries.size() / std::max(signals.window, 1);
        s.window = std::min(w, signals.window);
        s.window_queries = signals.window_queries.subspan((signals.window - s.window) * row);
      }
    }
    engine_.after_layer(s, cache);
  }
  void after_forward(int n_tokens, KVCache& cache) override { engine_.after_forward(n_tokens, cache); }

  int handed = 0;
  int widest_asked = 0;  // the widest query window the engine asked for in a prompt call

 private:
  BlockSegmentAttention twin_of(const KVCache& cache, const LayerSignals& s) const;

  EvictionEngine& engine_;
  const ModelConfig& config_;
  const Hand hand_;
  mutable ObservationRequest asked_;
  BlockSegmentAttention held_;
};

BlockSegmentAttention SegmentHandOver::twin_of(const KVCache& cache, const LayerSignals& s) const {
  DeviceKvTwin twin(test::twin_geometry_of(cache));
  const int d = cache.head_dim(), n = s.n_tokens;
  std::vector<float> keys(size_t(n) * d), values(keys.size());
  for (int h = 0; h < cache.n_kv_heads(); ++h) {
    cache.reconstruct_keys(s.layer, h, 0, n, keys.data());
    cache.reconstruct_values(s.layer, h, 0, n, values.data());
    twin.write_rows(s.layer, h, 0, n, keys.data(), values.data(), cache.positions(s.layer, h));
  }
  if (s.window != n) throw std::logic_error("test: the block's queries were not handed over");
  return segment_attention_twin(twin.layer_view(s.layer), config_.group_size(), s.window_queries.data(), n,
                                asked_.segment_attention);
}

struct SegmentRun {
  test::CallTrace trace;
  int handed = 0, widest_asked = 0;
};

class SegmentAttentionEngineTest : public test::StoriesPromptTest {
 protected:
  // The prompt (announced and prefilled as generate does), then greedy decode steps.
  static SegmentRun run(const std::string& name, const std::map<std::string, std::string>& params, Hand hand) {
    const auto policy = load_policy(name, params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(*policy, model_->config, EngineOptions{Budget::parse("50%"), 3});
    SegmentHandOver observer(engine, model_->config, hand);
    SegmentRun r;
    r.trace.record(prefill_prompt(*decoder, tokens_, &engine, &observer), decoder->cache());
    r.trace.decode_greedily(*decoder, &observer, 6);
    r.handed = observer.handed;
    r.widest_asked = observer.widest_asked;
    return r;
  }
  struct Policy {
    std::string name;
    std::map<std::string, std::string> params;
  };
  static std::vector<Policy> policies() {
    return {{"chunkpress", {{"chunk", "24"}, {"window", "6"}}},
            {"noncausal_attn", {{"chunk_size", "16"}}},
            {"compactor", {{"chunk_size", "20"}, {"sink_size_start", "2"}}}};
  }
};

TEST_F(SegmentAttentionEngineTest, TheDecodersSegmentAttentionKeepsTheCachesOfEveryQuery) {
  for (const Policy& p : policies()) {
    const SegmentRun rows = run(p.name, p.params, Hand::Rows);
    ASSERT_LT(rows.trace.layouts.front()[0][0].size(), size_t(S())) << p.name << " evicted nothing";
    ASSERT_GT(rows.trace.layouts.front()[0][0].size(), size_t(S() / 3)) << p.name << ": kept past the protected tokens";
    const SegmentRun decoder = run(p.name, p.params, Hand::Decoder);
    // The host rule is the engine's own computation on the same rows: the same bits.
    test::expect_same_calls(rows.trace, decoder.trace, p.name + ": the CPU decoder's A_seg");
    EXPECT_EQ(decoder.handed, model_->config.n_layers) << p.name;
    EXPECT_LT(decoder.widest_asked, S()) << p.name << ": asked for every query still";
    const SegmentRun twin = run(p.name, p.params, Hand::Twin);
    EXPECT_EQ(twin.handed, model_->config.n_layers) << p.name;
    EXPECT_EQ(twin.trace.layouts, rows.trace.layouts) << p.name << ": the device's algorithm";
    const SegmentRun planted = run(p.name, p.params, Hand::Planted);
    EXPECT_NE(planted.trace.layouts.front(), rows.trace.layouts.front()) << p.name << ": the planted A_seg was not read";
  }
}

TEST_F(SegmentAttentionEngineTest, APromptLayerWithNeitherIsRefused) {
  const Policy p = policies().front();
  EXPECT_THROW(run(p.name, p.params, Hand::Nothing), std::logic_error);
}

// A prompt nobody announced after decode steps is taken for a decode call (it reads rows): the
// engine asks for every query then, and makes A_seg itself, as before.
TEST_F(SegmentAttentionEngineTest, AnUnannouncedLaterPromptTakesEveryQuery) {
  const Policy p = policies().front();
  const auto policy = load_policy(p.name, p.params);
  const test::LaterPrompt later = test::later_prompt_layout(*model_, *policy, tokens_, Budget::parse("40"));
  EXPECT_FALSE(later.asked.segment_attention.enabled());
  EXPECT_EQ(later.asked.window, model_->config.context_length);
  EXPECT_EQ(later.layout, test::live_prompt_layout(*model_, *policy, tokens_, Budget::parse("40")));
}

// The eval sweep's shared prefill (evals/engine_evictor.cpp): one recorded full-cache prefill, each
// policy applied from it. The recorder keeps each distinct A_seg its policies read (several: made by
// the host rule from every query, which the decoder hands over for the call) and only the other
// policies' windows of queries, not every query of every layer; each policy then keeps the caches
// of its live run (prefill_prompt with the engine: the CPU decoder's A_seg, the same bits).
TEST_F(SegmentAttentionEngineTest, TheSweepRecordsTheSegmentAttentionInsteadOfEveryQuery) {
  std::vector<evals::PolicyChoice> choices;
  for (const Policy& p : policies()) choices.push_back({p.name, p.name, p.params, std::nullopt});
  choices.push_back({"snapkv", "snapkv", {}, std::nullopt});
  choices.push_back({"noncausal_attn", "noncausal_attn_again", policies()[1].params, std::nullopt});  // the same A_seg
  test::RecordedSweep sweep = test::record_sweep(*model_, choices, tokens_);
  EXPECT_EQ(sweep.asked.window, S()) << "every query is handed over for the call";
  const PrefillRecorder* recorder = sweep.recorder;
  ASSERT_NE(recorder, nullptr);
  // chunkpress's, noncausal_attn's (twice in the sweep, once recorded) and compactor's (chunks of 20).
  EXPECT_EQ(recorder->segment_requests().size(), 3u);
  for (const PrefillRecorder::Layer& layer : recorder->layers()) {
    EXPECT_LT(layer.window, S()) << "every query kept";
    EXPECT_EQ(layer.segment_attention.size(), 3u);
  }
  test::expect_applied_like_live(sweep, choices, *model_, tokens_, Budget::parse("50%"));
}

// A sweep whose policies read one A_seg asks the decoder for it (made on its device by the CUDA
// decoder) and for no query beyond their windows: the recording holds the decoder's A_seg.
TEST_F(SegmentAttentionEngineTest, OneSegmentAttentionOfASweepIsTheDecoders) {
  const Policy p = policies()[1];
  std::vector<evals::PolicyChoice> choices = {{p.name, p.name, p.params, std::nullopt},
                                              {p.name, "again", p.params, std::nullopt},
                                              {"snapkv", "snapkv", {}, std::nullopt}};
  test::RecordedSweep sweep = test::record_sweep(*model_, choices, tokens_);
  const SegmentAttentionRequest wanted = segment_attention_request_for(*load_policy(p.name, p.params), S());
  ASSERT_TRUE(wanted.enabled());
  EXPECT_EQ(sweep.asked.segment_attention, wanted);
  EXPECT_LT(sweep.asked.window, S()) << "every query asked for";
  ASSERT_NE(sweep.recorder, nullptr);
  for (const PrefillRecorder::Layer& layer : sweep.recorder->layers()) {
    EXPECT_LT(layer.window, S());
    ASSERT_EQ(layer.segment_attention.size(), 1u);
    EXPECT_EQ(layer.segment_attention[0].length, S());
  }
  test::expect_applied_like_live(sweep, choices, *model_, tokens_, Budget::parse("50%"));
}

}  // namespace
}  // namespace kvevict
