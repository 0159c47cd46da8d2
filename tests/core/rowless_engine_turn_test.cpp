// The strongest form of the engine's declaration that a decode step reads no cached key or value
// (ObservationRequest::cache_row_reads.next_token, core/engine/cache_row_reads.h): in such a
// call the engine is handed a host cache that HOLDS no row at all (every head position-only,
// KVCache::append_position, as the CUDA decoder's host cache is when every row lives on the
// device), so any read of a row throws instead of reading zeros or NaN. The keeps it makes there
// are replayed on the decoder's real cache. For every built-in policy that evicts while decoding
// and declares no reads, the run keeps the same caches and logits as with the placeholder flag
// alone (tests/core/decode_cache_reads_test.cpp), and a control that reads key norms throws.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "cache_row_reads_harness.h"
#include "lockstep_eviction.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

// Records the keeps made on a position-only cache; any other mutation is a failure of the test.
class KeepRecorder final : public KvCacheListener {
 public:
  struct Keep {
    int layer, head;
    std::vector<int> indices;
  };
  void on_append(int, int, int32_t, const float*, const float*) override { forbidden = true; }
  void on_keep(int l, int h, std::span<const int> idx) override { keeps.push_back({l, h, {idx.begin(), idx.end()}}); }
  void on_write_entry(int, int, int) override { forbidden = true; }
  void on_reassign(int, int) override { forbidden = true; }
  void on_codebook(int, int) override { forbidden = true; }
  void on_unfold() override { forbidden = true; }
  void on_clear() override { forbidden = true; }
  void on_replaced() override { forbidden = true; }
  std::vector<Keep> keeps;
  bool forbidden = false;
};

// In the calls where the engine declared it reads no cached row (one-token calls after the prompt),
// hands it a position-only copy of the cache, marks the rows as placeholders, and replays its keeps
// on the real cache. FlagOnly only marks them (the reference run); RowlessUnmarked hands over the
// position-only copy without the mark (the control: the engine's own guard is not told, so only
// the cache's refusal can stop a row read).
enum class TurnMode { FlagOnly, Rowless, RowlessUnmarked };
class RowlessTurns final : public ForwardObserver {
 public:
  RowlessTurns(EvictionEngine& engine, const ModelConfig& config, TurnMode mode)
      : engine_(engine), config_(config), flag_only_(mode == TurnMode::FlagOnly), mark_(mode != TurnMode::RowlessUnmarked) {}
  ObservationRequest request() const override {
    const ObservationRequest r = engine_.request();
    declared_ = r.cache_row_reads.next_token == CacheRowReads::None;
    return r;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    LayerSignals marked = signals;
    const bool declared = declared_ && signals.n_tokens == 1 && signals.first_position > 0;
    marked.cache_rows_are_placeholders = declared && mark_;
    if (!declared || flag_only_) return engine_.after_layer(marked, cache);
    rowless_turn(cache, [&](KVCache& rowless) { engine_.after_layer(marked, rowless); });
  }
  void after_forward(int n_tokens, KVCache& cache) override {
    if (!declared_ || n_tokens != 1 || flag_only_) return engine_.after_forward(n_tokens, cache);
    rowless_turn(cache, [&](KVCache& rowless) { engine_.after_forward(n_tokens, rowless); });
  }
  int rowless_turns = 0;
  bool forbidden = false;

 private:
  template <class Turn>
  void rowless_turn(KVCache& cache, Turn turn) {
    KVCache rowless(config_, cache.kv_type());
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int h = 0; h < cache.n_stored_heads(); ++h)
        for (int t = 0; t < cache.length(l, h); ++t) rowless.append_position(l, h, cache.positions(l, h)[t]);
    KeepRecorder recorder;
    rowless.set_listener(&recorder);
    turn(rowless);
    rowless.set_listener(nullptr);
    forbidden = forbidden || recorder.forbidden;
    for (const KeepRecorder::Keep& k : recorder.keeps) cache.keep(k.layer, k.head, k.indices);
    ++rowless_turns;
  }

  EvictionEngine& engine_;
  const ModelConfig& config_;
  const bool flag_only_, mark_;
  mutable bool declared_ = false;
};

class RowlessEngineTurnTest : public test::StoriesPromptTest {
 protected:
  struct Run : test::CallTrace {
    int rowless_turns = 0;
    bool forbidden = false;
  };
  static Run run(const PolicyProgram& policy, TurnMode mode, int steps = 30) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(policy, model_->config, {Budget::parse("40"), 3});
    RowlessTurns observer(engine, model_->config, mode);
    Run r;
    r.record(decoder->forward(tokens_, &observer), decoder->cache());
    r.decode_greedily(*decoder, &observer, steps);
    r.rowless_turns = observer.rowless_turns;
    r.forbidden = observer.forbidden;
    return r;
  }
};

TEST_F(RowlessEngineTurnTest, PoliciesThatDeclareNoRowReadsRunOnAPositionOnlyCache) {
  std::vector<std::string> checked;
  for (const char* name : {"cake", "h2o", "tova"}) {
    const auto policy = load_policy(name, {});
    ASSERT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::None) << name;
    const Run flagged = run(*policy, TurnMode::FlagOnly);
    Run rowless;
    ASSERT_NO_THROW(rowless = run(*policy, TurnMode::Rowless)) << name << " read a row the cache does not hold";
    EXPECT_FALSE(rowless.forbidden) << name << " edited a row, appended or re-assigned in a declared call";
    EXPECT_EQ(rowless.rowless_turns, 30 * (model_->config.n_layers + 1)) << name;
    test::expect_same_calls(flagged, rowless, name);
    EXPECT_LT(rowless.layouts.back()[0][0].size(), rowless.layouts.size() + S()) << name << " never evicted";
  }
}

// Control: a decode indicator over key norms, its declaration hidden and its calls unmarked (so the
// engine's own placeholder guard is not told), reads a row of the position-only cache and is
// stopped by the cache's refusal, not by a wrong result.
TEST_F(RowlessEngineTurnTest, ControlARowReaderThrowsOnAPositionOnlyCache) {
  const auto policy = test::key_norm_decode_policy();
  const test::HiddenDecodeReads hidden(*policy);
  ASSERT_EQ(decode_cache_row_reads(hidden.description()), CacheRowReads::None);
  try {
    run(hidden, TurnMode::RowlessUnmarked, 3);
    ADD_FAILURE() << "the key norms were computed from a cache that holds no row";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("held elsewhere"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
