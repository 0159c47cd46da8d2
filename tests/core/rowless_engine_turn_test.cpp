// The strongest form of the engine's declaration that a call reads no cached key or value
// (ObservationRequest::cache_row_reads, core/engine/cache_row_reads.h): in such a call, at the
// prompt or while decoding, the engine is handed a host cache that HOLDS no row at all (every head
// position-only with its rows' norms, KVCache::append_position, as the CUDA decoder's host cache is
// when every row lives on the device and the observer asked for row norms), so any read of a row
// throws instead of reading zeros or NaN. The keeps it makes there are replayed on the decoder's
// real cache. For every built-in policy that declares no reads in some call (the window attention
// handed over as the CUDA decoder does), the run keeps the same caches and logits as the reference
// run, and a control that reads the cached keys throws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/engine.h"
#include "core/engine/host_row_merges.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "cache_row_reads_harness.h"
#include "in_place_scoring.h"
#include "lockstep_eviction.h"
#include "prompt_end_stage_cases.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

// Records the keeps and position re-assignments made on a position-only cache, in order; any other
// mutation is a failure of the test.
class KeepRecorder final : public KvCacheListener {
 public:
  struct Keep {
    int layer, head;
    std::vector<int> indices;
    bool reassign = false;  // a re-assignment of the head's positions instead of a keep
  };
  void on_append(int, int, int32_t, const float*, const float*) override { forbidden = true; }
  void on_keep(int l, int h, std::span<const int> idx) override { keeps.push_back({l, h, {idx.begin(), idx.end()}}); }
  void on_write_entry(int, int, int) override { forbidden = true; }
  void on_reassign(int l, int h) override { keeps.push_back({l, h, {}, true}); }
  void on_codebook(int, int) override { forbidden = true; }
  void on_unfold() override { forbidden = true; }
  void on_clear() override { forbidden = true; }
  void on_replaced() override { forbidden = true; }
  std::vector<Keep> keeps;
  bool forbidden = false;
};

// The decoder's row merges as the test plays them: on its real cache (which holds the rows), counting
// the rows folded.
class CountingRowMerges final : public CachedRowMerges {
 public:
  explicit CountingRowMerges(KVCache& cache) : host_(cache) {}
  std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer, std::span<const KeptKeySearch> s) override {
    return host_.nearest_kept_keys(layer, s);
  }
  std::vector<double> value_norms(int layer, int head, std::span<const int> rows) override {
    return host_.value_norms(layer, head, rows);
  }
  void fold_rows(int layer, int head, const RowFolds& folds) override {
    host_.fold_rows(layer, head, folds);
    rows_folded += static_cast<int64_t>(folds.folds.size());
  }
  int64_t rows_folded = 0;

 private:
  HostRowMerges host_;
};

// Between the decoder and the engine, as the CUDA decoder acts: hands over the window attention the
// engine asks for (test::WindowAttentionInjector) and, in a call the engine declared it reads no
// row for (by the call's kind; NoneGivenDecoderSignals only where the window attention was handed
// over), marks the rows as placeholders and, in Rowless mode, gives the engine a position-only copy
// of the cache (test::position_only_copy) whose keeps are then replayed on the real cache.
// Reference marks only (the flag makes the engine take A_now from the decoder's column sums, as in
// the rowless run), and not for a policy that reads row norms: the engine refuses a norm read on a
// marked cache that holds rows (a placeholder may be among them). RowlessUnmarked hands over the
// copy without the mark (the control: only the cache's own refusal can stop a row read);
// RowlessWithoutNorms a marked copy that holds no norms (the control for a decoder not asked).
// RowlessIgnoringPromptEnd: Rowless, but the "decoder" ignores ObservationRequest::
// host_rows_at_prompt_end (the control of a codebook stage's rows: its after_forward gets the copy).
enum class TurnMode { Reference, Rowless, RowlessUnmarked, RowlessWithoutNorms, RowlessIgnoringPromptEnd };
class RowlessTurns final : public ForwardObserver {
 public:
  RowlessTurns(EvictionEngine& engine, KVCache& cache, const ModelConfig& config, TurnMode mode, bool norms,
               bool plant_wrong_window = false, bool plant_wrong_rows = false, bool offer_merges = true,
               bool plant_wrong_positions = false)
      : engine_(engine),
        injector_(engine, cache, config.group_size(), plant_wrong_window),
        merges_(cache),
        offer_merges_(offer_merges),
        config_(config),
        rowless_(mode != TurnMode::Reference),
        norms_(mode != TurnMode::RowlessWithoutNorms),
        mark_(mode == TurnMode::Rowless || mode == TurnMode::RowlessWithoutNorms ||
              mode == TurnMode::RowlessIgnoringPromptEnd || (mode == TurnMode::Reference && !norms)),
        bring_back_(mode != TurnMode::RowlessIgnoringPromptEnd) {
    injector_.plant_beyond_block_only();  // (when planting) the decode steps' rolling window only
    if (plant_wrong_rows) injector_.plant_wrong_cache_rows();
    if (plant_wrong_positions) injector_.plant_wrong_positions();
  }
  ObservationRequest request() const override {
    request_ = injector_.request();
    return request_;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    const LayerSignals with = injector_.inject(signals);
    call_end_ = signals.first_position + signals.n_tokens;
    const CacheRowReads reads = request_.cache_row_reads.for_call(signals.first_position, signals.n_tokens);
    // Served (as the CUDA decoder decides): something asked for, the window attention where it was
    // asked for, the cached rows (or their norms) where they were. The row merges run on the decoder's real cache
    // (the "device": it holds the rows), before the keeps made on the copy are replayed there.
    const bool rows_asked = cache_rows_wanted(request_).any();
    const bool merges_asked = request_.cached_row_merges;
    const bool stats_asked = request_.query_statistics.enabled;
    const bool served = (rows_asked || merges_asked || stats_asked || request_.window_attention > 0) &&
                        (request_.window_attention <= 0 || !with.window_attention.empty()) &&
                        (!rows_asked || !with.cache_rows.empty()) && (!stats_asked || with.query_statistics);
    const bool declared = rows_may_stay_on_device(reads, served);
    call_declared_ = call_declared_ || declared;
    LayerSignals marked = with;
    marked.cache_rows_are_placeholders = declared && mark_;
    if (marked.cache_rows_are_placeholders && merges_asked && offer_merges_) marked.cached_row_merges = &merges_;
    if (!declared || !rowless_) return engine_.after_layer(marked, cache);
    rowless_turn(cache, [&](KVCache& rowless) { engine_.after_layer(marked, rowless); });
  }
  void after_forward(int n_tokens, KVCache& cache) override {
    const bool declared = call_declared_;
    call_declared_ = false;
    if (!declared || !rowless_) return engine_.after_forward(n_tokens, cache);
    // Asked for (a codebook stage at the prompt's end): the decoder brings every row to the host
    // first, so the engine gets the real cache, the keeps it made on the copies replayed there.
    if (bring_back_ && request_.host_rows_at_prompt_end > 0 && call_end_ == request_.host_rows_at_prompt_end) {
      ++rows_brought_back;
      return engine_.after_forward(n_tokens, cache);
    }
    rowless_turn(cache, [&](KVCache& rowless) { engine_.after_forward(n_tokens, rowless); });
  }
  int rowless_turns = 0;
  int rows_brought_back = 0;  // after_forward calls handed the real cache for host_rows_at_prompt_end
  bool forbidden = false;
  // Layers handed a window attention of more queries than their call had (the rolling window).
  int64_t window_beyond_block() const { return injector_.injected_beyond_block(); }
  int64_t seeded_layers() const { return injector_.seeded_layers(); }
  int64_t rows_folded() const { return merges_.rows_folded; }

 private:
  template <class Turn>
  void rowless_turn(KVCache& cache, Turn turn) {
    KVCache rowless = test::position_only_copy(cache, config_, norms_);
    KeepRecorder recorder;
    rowless.set_listener(&recorder);
    turn(rowless);
    rowless.set_listener(nullptr);
    forbidden = forbidden || recorder.forbidden;
    for (const KeepRecorder::Keep& k : recorder.keeps) {
      if (k.reassign) {
        cache.reassign_positions(k.layer, k.head);
      } else {
        cache.keep(k.layer, k.head, k.indices);
      }
    }
    ++rowless_turns;
  }

  EvictionEngine& engine_;
  test::WindowAttentionInjector injector_;
  CountingRowMerges merges_;
  const bool offer_merges_;
  const ModelConfig& config_;
  const bool rowless_, norms_, mark_, bring_back_;
  mutable ObservationRequest request_;
  bool call_declared_ = false;
  int call_end_ = 0;  // the position after the current call's last token
};

class RowlessEngineTurnTest : public test::StoriesPromptTest {
 protected:
  struct Run : test::CallTrace {
    int rowless_turns = 0;
    int prompt_rowless_turns = 0;  // of rowless_turns, the prompt's (its layers and after_forward)
    bool forbidden = false;
    int64_t window_beyond_block = 0;
    int64_t seeded_layers = 0;  // layers whose held queries started from the engine's
    int64_t cache_rows_in_place = 0;  // EvictionReport::cache_rows_in_place
    int64_t row_norms_in_place = 0;   // EvictionReport::row_norms_in_place
    int64_t rows_folded = 0;          // rows the decoder's merges folded
    int64_t accumulated_in_place = 0;  // EvictionReport::accumulated_attention_in_place
    int64_t scores_in_place = 0;       // EvictionReport::scores_in_place
    int64_t codebook_graphs = 0;       // EvictionReport::codebook_graphs_by_selector
    int64_t positions_in_place = 0;    // EvictionReport::positions_in_place
    int64_t selection_positions_in_place = 0;  // EvictionReport::selection_positions_in_place
    int rows_brought_back = 0;                 // RowlessTurns::rows_brought_back
    int64_t key_codes = 0;                     // EvictionReport::key_codes
    int64_t pruned_key_channels = 0;           // EvictionReport::pruned_key_channels
  };
  // `block`, when not empty: a several-token call right after the prompt (a question block).
  // `announce`: the prompt goes through prefill_prompt, which announces it to the engine; false:
  // one forward call the engine learns of only when it arrives (a policy without prefill blocks).
  static Run run(const PolicyProgram& policy, TurnMode mode, int steps = 30, bool plant_wrong_window = false,
                 bool plant_wrong_rows = false, const std::vector<int>& block = {}, bool offer_merges = true,
                 std::optional<SelectionDevice> selection = std::nullopt, bool announce = true,
                 bool plant_wrong_positions = false) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EngineOptions options{Budget::parse("40"), 3};
    options.selection = selection;
    EvictionEngine engine(policy, model_->config, options);
    RowlessTurns observer(engine, decoder->cache(), model_->config, mode, policy.description().needs_row_norms(),
                          plant_wrong_window, plant_wrong_rows, offer_merges, plant_wrong_positions);
    Run r;
    r.record(announce ? prefill_prompt(*decoder, tokens_, &engine, &observer) : decoder->forward(tokens_, &observer),
             decoder->cache());
    r.prompt_rowless_turns = observer.rowless_turns;
    if (!block.empty()) r.record(decoder->forward(block, &observer), decoder->cache());
    r.decode_greedily(*decoder, &observer, steps);
    r.rowless_turns = observer.rowless_turns;
    r.forbidden = observer.forbidden;
    r.window_beyond_block = observer.window_beyond_block();
    r.seeded_layers = observer.seeded_layers();
    r.rows_folded = observer.rows_folded();
    r.cache_rows_in_place = engine.report().cache_rows_in_place;
    r.row_norms_in_place = engine.report().row_norms_in_place;
    r.accumulated_in_place = engine.report().accumulated_attention_in_place;
    r.scores_in_place = engine.report().scores_in_place;
    r.codebook_graphs = engine.report().codebook_graphs_by_selector;
    r.positions_in_place = engine.report().positions_in_place;
    r.selection_positions_in_place = engine.report().selection_positions_in_place;
    r.rows_brought_back = observer.rows_brought_back;
    r.key_codes = engine.report().key_codes;
    r.pruned_key_channels = engine.report().pruned_key_channels;
    return r;
  }
  // The same run with the rows kept on the host: the same window attention handed over (the
  // twin's), every row on the host. The reference of the rowless runs: the engine alone computes A
  // on the host, which agrees with the twin's tiled online softmax only to rounding, and a near-tie
  // in CAKE's score-ordered kept list flipped between the two on a Zen 4 machine under ASan (-O2),
  // though not in Release.
  static Run reference_run(const PolicyProgram& policy, int steps = 30, const std::vector<int>& block = {}) {
    return run(policy, TurnMode::Reference, steps, false, false, block);
  }
};

// Whether some call of `d`'s run may be declared: its prompt (announced by prefill_prompt), or its
// decode steps when it evicts or records while decoding.
bool declares_some_call(const PolicyDescription& d) {
  return prompt_cache_row_reads(d, CachedRowSignals::ReadOnHost, PromptAnnouncement::BeforeTheCall) !=
             CacheRowReads::Reads ||
         (d.run.decode_every > 0 && decode_cache_row_reads(d) != CacheRowReads::Reads);
}

// Every built-in, in every call it declares it reads no row (by the policy: its prompt, its decode
// steps; or by the step: a decode step that does not trigger the decode eviction): the same caches
// and logits on a cache that holds positions and norms only in those calls. Every built-in that
// declares so by policy has such calls (the norm readers, whose key_norm and value_norm come with
// the positions, and CAKE, H2O and TOVA while decoding are among them); the others run here too,
// so that a step declared by the step rule cannot read a row unseen.
TEST_F(RowlessEngineTurnTest, EveryBuiltinThatDeclaresNoRowReadsRunsOnAPositionOnlyCache) {
  std::vector<std::string> checked, with_norms, by_step;
  for (const std::string& file : builtin_policy_files()) {
    const std::unique_ptr<PolicyProgram> policy = test::load_or_null(file, test::short_prompt_settings(file));
    if (!policy) continue;  // it needs a setting or a model this test does not give it
    const PolicyDescription& d = policy->description();
    const std::string name = std::filesystem::path(file).stem().string();
    Run reference;
    try {
      reference = run(*policy, TurnMode::Reference);
    } catch (const UsageError&) {
      continue;  // refused on this model and budget
    }
    Run rowless;
    ASSERT_NO_THROW(rowless = run(*policy, TurnMode::Rowless)) << name << " read a row the cache does not hold";
    EXPECT_FALSE(rowless.forbidden) << name << " edited a row or appended in a declared call";
    test::expect_same_calls(reference, rowless, name);
    if (declares_some_call(d)) {
      EXPECT_GT(rowless.rowless_turns, 0) << name << ": no call ran on a position-only cache";
      checked.push_back(name);
      if (d.needs_row_norms()) with_norms.push_back(name);
    } else if (rowless.rowless_turns > 0) {
      by_step.push_back(name);
    }
  }
  std::string names, norm_names, step_names;
  for (const std::string& n : checked) names += n + " ";
  for (const std::string& n : with_norms) norm_names += n + " ";
  for (const std::string& n : by_step) step_names += n + " ";
  std::printf("policies run on a position-only cache: %s\nof which read row norms: %s\n"
              "others whose decode steps between evictions ran on it: %s\n",
              names.c_str(), norm_names.c_str(), step_names.c_str());
  const auto has = [](const std::vector<std::string>& v, const char* n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  // StreamingLLM re-assigns positions (its default): the copy re-numbers, the real cache re-rotates.
  for (const char* n : {"cake", "h2o", "tova", "snapkv", "streamingllm"}) EXPECT_TRUE(has(checked, n)) << n;
  // SpindleKV's codebook stage and ThinK's key channels read the kept rows, brought to the host
  // at the prompt's end.
  for (const char* n : {"spindlekv", "think"}) EXPECT_TRUE(has(checked, n)) << n;
  // Windows found from the prompt's length (NACL's proxy share) or tokens (FINCH's delimiter),
  // known before the call because prefill_prompt announces the prompt.
  for (const char* n : {"nacl", "finch"}) EXPECT_TRUE(has(checked, n)) << n;
  // Key norms at the prompt (knorm), and kvpress's decoding presses over key norms while decoding.
  for (const char* n : {"knorm", "decoding", "compression_ratio_decoding"}) EXPECT_TRUE(has(with_norms, n)) << n;
  // Row readers at the prompt that never evict while decoding: every decode step is declared.
  for (const char* n : {"keydiff", "expected_attention"}) EXPECT_TRUE(has(by_step, n)) << n;
}

// SpindleKV's codebook stage and ThinK's key channels rewrite the kept rows at the end of the
// prompt. Their prompt's calls read no row (the window attention is handed over; ThinK's channel
// program runs at the end), so the prompt's layers run on a position-only cache; the engine asks
// the decoder to bring the kept rows to the host before the prompt's after_forward
// (ObservationRequest::host_rows_at_prompt_end), where the stage runs: the same caches, codebooks,
// pruned channels and logits as with every row on the host. A decoder that ignores the request
// hands the stage a cache without rows, which throws; a prompt nobody announced (its end unknown
// before the call) reads its rows on the host as before.
TEST_F(RowlessEngineTurnTest, StagesAtThePromptsEndReadTheKeptRowsBroughtBack) {
  for (const test::PromptEndStageCase& stage : test::prompt_end_stage_cases()) {
    const std::string& what = stage.label;
    const auto policy = load_policy(stage.policy, stage.params);
    ASSERT_TRUE(prompt_end_edits_rows(policy->description())) << what;
    const Run reference = reference_run(*policy, 12);
    ASSERT_GT(reference.key_codes + reference.pruned_key_channels, 0) << what << ": the stage ran";
    const Run rowless = run(*policy, TurnMode::Rowless, 12);
    EXPECT_GE(rowless.prompt_rowless_turns, model_->config.n_layers) << what << ": the prompt's layers";
    EXPECT_EQ(rowless.rows_brought_back, 1) << what << ": once, at the prompt's end";
    EXPECT_FALSE(rowless.forbidden) << what;
    EXPECT_EQ(rowless.key_codes, reference.key_codes) << what;
    EXPECT_EQ(rowless.pruned_key_channels, reference.pruned_key_channels) << what;
    test::expect_same_calls(reference, rowless, what);

    try {
      run(*policy, TurnMode::RowlessIgnoringPromptEnd, 12);
      ADD_FAILURE() << what << ": the stage ran on a cache whose rows stayed on the device";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("held elsewhere"), std::string::npos) << what << ": " << e.what();
    }

    const Run unannounced = run(*policy, TurnMode::Rowless, 12, false, false, {}, true, std::nullopt,
                                /*announce=*/false);
    EXPECT_EQ(unannounced.prompt_rowless_turns, 0) << what << ": an unannounced prompt reads its rows";
    EXPECT_EQ(unannounced.rows_brought_back, 0) << what;
    test::expect_same_calls(reference, unannounced, "unannounced " + what);
  }
}

// CAKE, H2O and TOVA evict while decoding: every decode step (and after_forward) ran on the
// position-only cache, with evictions.
TEST_F(RowlessEngineTurnTest, DecodeStepsOfCakeH2oAndTovaRunOnAPositionOnlyCache) {
  for (const char* name : {"cake", "h2o", "tova"}) {
    const auto policy = load_policy(name, {});
    ASSERT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::None) << name;
    const Run rowless = run(*policy, TurnMode::Rowless);
    EXPECT_GE(rowless.rowless_turns, 30 * (model_->config.n_layers + 1)) << name;
    EXPECT_LT(rowless.layouts.back()[0][0].size(), rowless.layouts.size() + S()) << name << " never evicted";
  }
}

// MorphKV, Scissorhands, CAKE's paper indicator and NACL evicting while decoding (the paper's
// Algorithm 1; its official proxy is not causal) score decode steps by the window attention of the
// last W queries, generated ones included (NoneGivenDecoderSignals). Handed it as the CUDA
// decoder computes it, from the queries it holds (more rows than the one-token call has), every
// decode step runs on a position-only cache, with evictions, and keeps the caches and logits of
// the same run with its rows on the host (reference_run). Control: a planted buffer (each
// row reversed) changes the caches, so the engine did read the one handed over.
// NACL's window comes from the prompt's length: announced (prefill_prompt), its prompt runs on the
// position-only cache too and the decoder holds the window's queries from then on; a prompt the
// engine learns of only when it arrives reads its rows, and at the first decode step the decoder
// starts its held queries from the engine's own (ObservationRequest::observer_queries), with the
// same caches.
TEST_F(RowlessEngineTurnTest, RollingWindowDecodeIndicatorsRunOnAPositionOnlyCache) {
  const int L = model_->config.n_layers;
  const std::map<std::string, std::string> nacl{{"decode_interval", "1"},
                                                {"budget_split", "explicit"},
                                                {"explicit_sinks", "4"},
                                                {"explicit_proxy", "0.1"}};
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"morphkv", {}},
           {"scissorhands", {}},
           {"cake", {{"decode_indicator", "mean_plus_gamma_var"}}},
           {"nacl", nacl}}) {
    const auto policy = load_policy(name, params);
    ASSERT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::NoneGivenDecoderSignals) << name;
    const int steps = 30;
    const Run plain = reference_run(*policy, steps);
    const Run rowless = run(*policy, TurnMode::Rowless, steps);
    EXPECT_GE(rowless.rowless_turns - rowless.prompt_rowless_turns, steps * (L + 1)) << name << ": a decode step read rows";
    EXPECT_GE(rowless.window_beyond_block, steps * L) << name << ": the rolling window was not handed over";
    EXPECT_EQ(rowless.seeded_layers, 0) << name << ": the held queries started over";
    EXPECT_FALSE(rowless.forbidden) << name;
    test::expect_same_calls(plain, rowless, name);
    if (name == std::string("nacl")) {
      EXPECT_EQ(rowless.prompt_rowless_turns, L + 1) << "nacl's announced prompt read rows";
      const Run unannounced = run(*policy, TurnMode::Rowless, steps, false, false, {}, true, std::nullopt,
                                  /*announce=*/false);
      EXPECT_EQ(unannounced.prompt_rowless_turns, 0) << "a window found from a prompt not announced is unknown";
      EXPECT_EQ(unannounced.seeded_layers, L) << "the held queries did not start from the engine's";
      EXPECT_GE(unannounced.rowless_turns, steps * (L + 1));
      test::expect_same_calls(plain, unannounced, "nacl, not announced");
    }
    EXPECT_LT(rowless.layouts.back()[0][0].size(), rowless.layouts.size() + S()) << name << " never evicted";
    const Run planted = run(*policy, TurnMode::Rowless, steps, /*plant_wrong_window=*/true);
    ASSERT_EQ(planted.layouts.size(), rowless.layouts.size());
    EXPECT_EQ(planted.layouts[0], rowless.layouts[0]) << name << ": only the decode steps' buffers were planted";
    EXPECT_NE(planted.layouts, rowless.layouts) << name << " did not read the window attention handed over";
  }
}

// Between two decode evictions (decode_every > 1) a step scores nothing, so it reads no row whatever
// the indicator reads: R-KV (cached keys, every 128 steps by default) runs its other steps on a
// position-only cache and reads the rows only at its trigger steps, keeping the caches and logits
// of the same run with its rows on the host. (CAM, every 512, reads no row at its triggers either: MergesRunWhereTheRows
// AreOnAPositionOnlyCache.) Control: the same policy evicting every step declares every step.
TEST_F(RowlessEngineTurnTest, StepsBetweenDecodeEvictionsRunOnAPositionOnlyCache) {
  const int L = model_->config.n_layers, steps = 32, every = 8;
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"rkv", {{"decode_interval", std::to_string(every)}}}}) {
    const auto policy = load_policy(name, params);
    ASSERT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::Reads) << name;
    const Run plain = reference_run(*policy, steps);
    const Run rowless = run(*policy, TurnMode::Rowless, steps);
    EXPECT_EQ(rowless.rowless_turns, (steps - steps / every) * (L + 1))
        << name << ": the steps between evictions";
    EXPECT_FALSE(rowless.forbidden) << name;
    test::expect_same_calls(plain, rowless, name);
    bool evicted = false;  // at a trigger step, on the real rows
    for (size_t i = 1; i < rowless.layouts.size(); ++i)
      evicted = evicted || rowless.layouts[i][0][0].size() < rowless.layouts[i - 1][0][0].size();
    EXPECT_TRUE(evicted) << name << " never evicted while decoding";
  }
  const auto every_step = load_policy("rkv", {{"decode_interval", "1"}});
  EXPECT_EQ(run(*every_step, TurnMode::Rowless, 4).rowless_turns, 0) << "a step that evicts reads its rows";
}

// Merge-on-evict run where the rows are (ObservationRequest::cached_row_merges; the CUDA decoder's
// mirror on the device): D2O (its prompt and every decode step, keys and values folded by cosine
// with an EMA threshold), CAM (values spread over the next kept entries at its triggers, every 8
// steps here), LOOK-M's pivot, KVMerger's weighted and kvpress MergingPress's nearest folds (value
// norms from the decoder) declare NoneGivenDecoderSignals, every call of theirs runs on a
// position-only cache while the merges run on the decoder's real rows, and the caches and logits
// are those of the same run with its rows on the host. Control: without the decoder's merges the engine refuses (it would read
// rows it does not hold).
TEST_F(RowlessEngineTurnTest, MergesRunWhereTheRowsAreOnAPositionOnlyCache) {
  const int L = model_->config.n_layers, steps = 16;
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"d2o", {}},
           {"cam", {{"compression_interval", "8"}}},
           {"look_m", {}},
           {"kvmerger", {}},
           {"merging_press", {}}}) {
    const auto policy = load_policy(name, params);
    const PolicyDescription& d = policy->description();
    ASSERT_TRUE(merge_given_by_decoder(d.merge)) << name;
    EXPECT_EQ(prompt_cache_row_reads(d), CacheRowReads::NoneGivenDecoderSignals) << name;
    if (d.run.decode_every > 0) {
      EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::NoneGivenDecoderSignals) << name;
    }
    const Run plain = reference_run(*policy, steps);
    const Run rowless = run(*policy, TurnMode::Rowless, steps);
    EXPECT_EQ(rowless.rowless_turns, (steps + 1) * (L + 1)) << name << ": a call read rows";
    EXPECT_FALSE(rowless.forbidden) << name;
    test::expect_same_calls(plain, rowless, name);
    EXPECT_GT(rowless.rows_folded, 0) << name << ": nothing was merged through the decoder's merges";
    EXPECT_THROW(run(*policy, TurnMode::Rowless, steps, false, false, {}, /*offer_merges=*/false), std::logic_error)
        << name << ": merged without the decoder's merges";
  }
  EXPECT_EQ(prompt_cache_row_reads(load_policy("spindlekv", {})->description()), CacheRowReads::Reads)
      << "a codebook rewrites whole heads on the host";
}

// A several-token call after the prompt (the eval sweep's question block) that does not trigger the
// decode eviction scores nothing, so it reads no row: SnapKV (no decode eviction) and R-KV between
// its triggers run it on a position-only cache, with the caches and logits of the same run with
// its rows on the host.
// Control: on CAKE (evicting every step) the block triggers and reads rows (Reads).
TEST_F(RowlessEngineTurnTest, BlocksAfterThePromptThatTriggerNothingRunOnAPositionOnlyCache) {
  const int L = model_->config.n_layers, steps = 6;
  const std::vector<int> block(tokens_.begin() + 3, tokens_.begin() + 8);
  struct Case {
    const char* name;
    std::map<std::string, std::string> params;
    int rowless_calls;  // of the prompt, the block and the steps
  };
  for (const Case& c : std::vector<Case>{{"snapkv", {}, 1 + 1 + steps},
                                         {"rkv", {{"decode_interval", "4"}}, 1 + steps - 1},
                                         {"cake", {}, 1 + steps}}) {
    const auto policy = load_policy(c.name, c.params);
    EvictionEngine probe(*policy, model_->config, {Budget::parse("40"), 3});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    prefill_prompt(*decoder, tokens_, &probe, &probe);
    const CacheRowReads block_reads = probe.request().cache_row_reads.next_block;
    EXPECT_EQ(block_reads, std::string(c.name) == "cake" ? CacheRowReads::Reads : CacheRowReads::None) << c.name;
    const Run plain = reference_run(*policy, steps, block);
    const Run rowless = run(*policy, TurnMode::Rowless, steps, false, false, block);
    // R-KV reads its prompt's rows on the host and evicts at its 4th step (the block is its first).
    EXPECT_EQ(rowless.rowless_turns, c.rowless_calls * (L + 1)) << c.name;
    EXPECT_FALSE(rowless.forbidden) << c.name;
    test::expect_same_calls(plain, rowless, c.name);
  }
}

// Scored on the decoder's device (test::InPlaceScoring, the stand-in for the GPU backend), K and V
// are read where the decoder copies them out (LayerSignals::cache_rows; CachedRowSignals::
// GivenOnDevice): R-KV (its last 8 queries' window attention, its keys' redundancy and norms, at
// the prompt and at its decode triggers), KeyDiff (its keys against their mean direction, at the
// prompt), LU-KV (ExpectedAttention over K and value norms, with a head plan from a table that
// reads no signal, handed its scalars alone) and an indicator over K at every call declare
// NoneGivenDecoderSignals where they read
// rows, every call of theirs runs on a position-only cache, and the caches and logits are those of
// the same run with its rows on the host (where the engine reads them). Control: planted rows (each head's entries in
// reverse order) change the caches, so the engine read what was handed over.
TEST_F(RowlessEngineTurnTest, DeviceScoringReadsKAndVInPlaceOnAPositionOnlyCache) {
  const int L = model_->config.n_layers, steps = 16;
  std::vector<std::pair<std::string, std::unique_ptr<PolicyProgram>>> policies;
  policies.emplace_back("rkv", load_policy("rkv", {{"decode_interval", "8"}}));
  policies.emplace_back("keydiff", load_policy("keydiff", {}));
  policies.emplace_back("lukv", load_policy("lukv", {}));
  policies.emplace_back("key_reading_control", test::key_reading_policy());
  for (const auto& [name, policy] : policies) {
    const PolicyDescription& d = policy->description();
    EXPECT_EQ(prompt_cache_row_reads(d), CacheRowReads::Reads) << name << " reads its rows on the host";
    EXPECT_EQ(prompt_cache_row_reads(d, CachedRowSignals::GivenOnDevice), CacheRowReads::NoneGivenDecoderSignals)
        << name;
    if (d.run.decode_every > 0) {
      EXPECT_EQ(decode_cache_row_reads(d, CachedRowSignals::GivenOnDevice), CacheRowReads::NoneGivenDecoderSignals)
          << name;
    }
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/false);
    const Run plain = reference_run(*policy, steps);
    const Run rowless = run(device, TurnMode::Rowless, steps);
    EXPECT_EQ(rowless.rowless_turns, (steps + 1) * (L + 1)) << name << ": a call read rows";
    EXPECT_FALSE(rowless.forbidden) << name;
    EXPECT_GE(device.scored_rows_in_place, L * model_->config.n_kv_heads) << name;
    EXPECT_EQ(rowless.cache_rows_in_place, device.scored_rows_in_place) << name << ": the report counts each scoring";
    test::expect_same_calls(plain, rowless, name);
    const Run planted = run(device, TurnMode::Rowless, steps, /*plant_wrong_window=*/false, /*plant_wrong_rows=*/true);
    ASSERT_EQ(planted.layouts.size(), rowless.layouts.size()) << name;
    EXPECT_NE(planted.layouts, rowless.layouts) << name << " did not read the rows handed over";
  }
}

// Scored on the decoder's device, key and value norms are read where the decoder computes them
// (LayerSignals::cache_rows' norms), not held with the positions on the host: KNorm's prompt and
// kvpress's DecodingPress (its decode triggers over key norms) declare NoneGivenDecoderSignals, run
// every call on a position-only cache that holds NO norm (the host-held norms are not asked for),
// and keep the caches and logits of the run with the rows on the host. Controls: planted norms
// (each head's in reverse order) change the caches; the same runs with the norms held on the host
// (the interpreter's path) read none in place.
TEST_F(RowlessEngineTurnTest, DeviceScoringReadsRowNormsInPlaceWithNoNormOnTheHost) {
  const int L = model_->config.n_layers, steps = 16;
  std::vector<std::pair<std::string, std::unique_ptr<PolicyProgram>>> policies;
  policies.emplace_back("knorm", load_policy("knorm", {}));
  policies.emplace_back("decoding", load_policy("decoding", {{"compression_interval", "4"}}));
  for (const auto& [name, policy] : policies) {
    const PolicyDescription& d = policy->description();
    EXPECT_EQ(prompt_cache_row_reads(d), CacheRowReads::None) << name << ": its norms held with the positions";
    EXPECT_EQ(prompt_cache_row_reads(d, CachedRowSignals::GivenOnDevice), CacheRowReads::NoneGivenDecoderSignals)
        << name;
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/false);
    const Run plain = reference_run(*policy, steps);
    EXPECT_EQ(plain.row_norms_in_place, 0) << name;
    const Run rowless = run(device, TurnMode::RowlessWithoutNorms, steps);
    EXPECT_EQ(rowless.rowless_turns, (steps + 1) * (L + 1)) << name << ": a call read rows";
    EXPECT_FALSE(rowless.forbidden) << name;
    EXPECT_GE(device.scored_norms_in_place, L * model_->config.n_kv_heads) << name;
    EXPECT_GE(rowless.row_norms_in_place, device.scored_norms_in_place) << name;
    test::expect_same_calls(plain, rowless, name);
    const Run planted = run(device, TurnMode::RowlessWithoutNorms, steps, false, /*plant_wrong_rows=*/true);
    ASSERT_EQ(planted.layouts.size(), rowless.layouts.size()) << name;
    EXPECT_NE(planted.layouts, rowless.layouts) << name << " did not read the norms handed over";
  }
}

// Scored on the decoder's device, the positions (`pos`, random()'s key) are read where the
// decoder's device cache holds them (LayerSignals::cached_positions), not uploaded from the host
// per head: Random (its prompt), random scores every 4 decode steps (after evictions, every head's
// positions its own, with gaps: another head's or the slots would keep other entries), StreamingLLM
// keeping true positions (its prompt and decode evictions) and DecodingPress with StreamingLLM's
// rule (its decode triggers) keep the caches and logits of the run scored on the host's positions,
// and every scoring of theirs read them in place. Controls: planted positions (each head's in
// reverse order) change the caches; the interpreter's run reads none in place.
TEST_F(RowlessEngineTurnTest, DeviceScoringReadsThePositionsInPlace) {
  const int L = model_->config.n_layers, steps = 16;
  std::vector<std::pair<std::string, std::unique_ptr<PolicyProgram>>> policies;
  policies.emplace_back("random", load_policy("random", {}));
  policies.emplace_back("random_decoding", test::random_decoding_policy(4, /*reassign=*/false));
  policies.emplace_back("streamingllm", load_policy("streamingllm", {{"position_mode", "true_positions"}}));
  policies.emplace_back("decoding",
                        load_policy("decoding", {{"inner", "streaming_llm"}, {"compression_interval", "4"}}));
  for (const auto& [name, policy] : policies) {
    ASSERT_TRUE(policy->description().needs(TensorSignal::Position)) << name;
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/false);
    const Run plain = reference_run(*policy, steps);
    EXPECT_EQ(plain.positions_in_place, 0) << name;
    const Run in_place = run(device, TurnMode::Rowless, steps);
    const int64_t scored = device.scored_positions_in_place;
    EXPECT_GE(scored, L * model_->config.n_kv_heads) << name;
    EXPECT_EQ(in_place.positions_in_place, scored) << name << ": every scoring was handed them";
    EXPECT_FALSE(in_place.forbidden) << name;
    test::expect_same_calls(plain, in_place, name);
    const Run planted = run(device, TurnMode::Rowless, steps, false, false, {}, true, std::nullopt, true,
                            /*plant_wrong_positions=*/true);
    ASSERT_EQ(planted.layouts.size(), in_place.layouts.size()) << name;
    EXPECT_NE(planted.layouts, in_place.layouts) << name << " did not read the positions handed over";
  }
}

// Positions re-assigned in the cache after each eviction (run.reassign_positions, StreamingLLM's
// default) are not the ones a program reads (`pos` and random()'s key stay the original positions,
// which only the engine holds): a policy scoring random keys at every decode step then reads the
// device cache's positions at its prompt only, before its first eviction re-assigns them, and keeps
// the interpreter's caches (with the device's re-assigned positions its random keys would differ).
TEST_F(RowlessEngineTurnTest, DeviceScoringReadsNoReassignedPositions) {
  const auto policy = test::random_decoding_policy(1, /*reassign=*/true);
  const test::InPlaceScoring device(*policy, /*layers_on_device=*/false);
  const Run plain = reference_run(*policy, 12);
  const Run in_place = run(device, TurnMode::Rowless, 12);
  EXPECT_EQ(in_place.positions_in_place, model_->config.n_layers * model_->config.n_kv_heads) << "the prompt's only";
  test::expect_same_calls(plain, in_place, "random_reassigned");
}

// The built-ins the stand-in device backend can score (no extra stage or channel program: it
// forwards neither, and the engine reads nothing in place for such a policy), by name.
std::vector<std::pair<std::string, std::unique_ptr<PolicyProgram>>> builtins_the_stand_in_scores() {
  std::vector<std::pair<std::string, std::unique_ptr<PolicyProgram>>> out;
  for (const std::string& file : builtin_policy_files()) {
    std::unique_ptr<PolicyProgram> policy = test::load_or_null(file, test::short_prompt_settings(file));
    if (!policy || !policy->description().select.stages.empty() || policy->description().channels.enabled) continue;
    out.emplace_back(std::filesystem::path(file).stem().string(), std::move(policy));
  }
  return out;
}

// The window queries themselves (Q, Q_pre) read no cached row: the decoder hands the newest
// request().window query rows in every call. A policy weighting the window attention by its
// queries' norms declares NoneGivenDecoderSignals at the prompt and while decoding (it was Reads:
// Q counted as attended over the keys), runs every call on a position-only cache with the caches
// and logits of the run on the real rows, and a planted window attention changes them. Control:
// the same weights from the window's attention outputs O (A times the cached values) still read.
TEST_F(RowlessEngineTurnTest, WindowQueryRowsReadNoRow) {
  const int L = model_->config.n_layers, steps = 12;
  const std::string head = "protect: {recent: 8}\nobserve: {window: 8}\nrun:\n  prefill: true\n  decode_every: 1\n";
  const auto queries = test::policy_from_text(
      "query_weighted", "name: query_weighted\nabout: window attention weighted by its queries\n" + head +
                            "score: |\n  w[h, q] = sum(d: Q[h, q, d] * Q_pre[h, q, d])\n"
                            "  score[t] = sum(h: sum(q: A[h, q, t] * w[h, q]))\n");
  const PolicyDescription& d = queries->description();
  ASSERT_TRUE(d.needs(TensorSignal::WindowQueryRows) && d.needs(TensorSignal::WindowQueryRowsPreRope));
  EXPECT_EQ(prompt_cache_row_reads(d), CacheRowReads::NoneGivenDecoderSignals);
  EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::NoneGivenDecoderSignals);
  const Run plain = reference_run(*queries, steps);
  const Run rowless = run(*queries, TurnMode::Rowless, steps);
  EXPECT_EQ(rowless.rowless_turns, (steps + 1) * (L + 1)) << "a call read rows";
  EXPECT_FALSE(rowless.forbidden);
  test::expect_same_calls(plain, rowless, "query_weighted");
  const Run planted = run(*queries, TurnMode::Rowless, steps, /*plant_wrong_window=*/true);
  ASSERT_EQ(planted.layouts.size(), rowless.layouts.size());
  EXPECT_NE(planted.layouts, rowless.layouts) << "the window attention handed over was not read";

  const auto outputs = test::policy_from_text(
      "output_weighted", "name: output_weighted\nabout: window attention weighted by its outputs\n" + head +
                             "score: |\n  w[h, q] = sum(d: O[h, q, d] * O[h, q, d])\n"
                             "  score[t] = sum(h: sum(q: A[h, q, t] * w[h, q]))\n");
  EXPECT_EQ(prompt_cache_row_reads(outputs->description()), CacheRowReads::Reads);
  EXPECT_EQ(decode_cache_row_reads(outputs->description()), CacheRowReads::Reads);
}

// Every built-in scored by the stand-in device backend (so K and V count as handed over where the
// engine can read them in place): every call it then declares runs on a position-only cache and
// keeps the caches and logits of the same run on the real rows. KeyDiff, QFilter and BlockPress
// (their prompts), R-KV (its prompt), Leverage and Compactor (K_pre, rotated back where the rows are)
// are among those whose calls read rows on the host otherwise.
TEST_F(RowlessEngineTurnTest, EveryBuiltinScoredOnTheDeviceRunsItsDeclaredCallsOnAPositionOnlyCache) {
  std::vector<std::string> rows_in_place, hidden_in_place;
  for (const auto& [name, policy] : builtins_the_stand_in_scores()) {
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
    Run reference;
    try {
      reference = run(device, TurnMode::Reference, 12);
    } catch (const UsageError&) {
      continue;  // refused on this model and budget
    }
    const int64_t before = device.scored_rows_in_place, hidden_before = device.scored_hidden_in_place;
    Run rowless;
    ASSERT_NO_THROW(rowless = run(device, TurnMode::Rowless, 12)) << name << " read a row the cache does not hold";
    EXPECT_FALSE(rowless.forbidden) << name;
    test::expect_same_calls(reference, rowless, name);
    if (device.scored_rows_in_place > before) rows_in_place.push_back(name);
    if (device.scored_hidden_in_place > hidden_before) hidden_in_place.push_back(name);
  }
  // KVzap's attention inputs are the decoder's block, transposed where it made them.
  EXPECT_EQ(hidden_in_place, std::vector<std::string>{"kvzap"});
  std::string names;
  for (const std::string& n : rows_in_place) names += n + " ";
  std::printf("built-ins whose K, V, K_pre or out_norm_l1 was read in place: %s\n", names.c_str());
  // DefensiveKV's out_norm_l1 is made from the values and W_o where the rows are; LU-KV's head plan
  // reads no signal, so its K is read in place too.
  for (const char* n : {"blockpress", "cap", "compactor", "defensive_kv", "expected_attention",
                        "expected_attention_stats", "keydiff", "leverage", "lukv", "qfilter", "rkv"})
    EXPECT_NE(std::find(rows_in_place.begin(), rows_in_place.end(), n), rows_in_place.end()) << n;
}

// Every built-in scored by the stand-in device backend and selected by the twin (the device
// algorithm on the CPU): the same caches and logits as selected on the host, every declared call
// on a position-only cache. The ones reading A_acc then hold it in the engine's device store
// (accumulated_attention_store.h), added from the decoder's host sums here (the CPU decoder makes
// no device copy); H2O among them. The ones whose decode evictions are a plain per-head top-k
// or TOVA's layer-shared one write their decode scores into the selector's buffer (scores_in_place);
// CAKE, H2O and TOVA among them. SpindleKV's similarity graphs are the twin's (the device's element
// body, codebook_graph.h), and its caches still the host's.
TEST_F(RowlessEngineTurnTest, EveryBuiltinScoredAndSelectedOnTheDeviceKeepsTheHostSelectionsCaches) {
  std::vector<std::string> accumulated_on_device, scored_in_buffer, built_graphs, positions_held;
  for (const auto& [name, policy] : builtins_the_stand_in_scores()) {
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
    Run host;
    try {
      host = run(device, TurnMode::Rowless, 12);
    } catch (const UsageError&) {
      continue;  // refused on this model and budget
    }
    Run twin;
    ASSERT_NO_THROW(twin = run(device, TurnMode::Rowless, 12, false, false, {}, true, SelectionDevice::Twin)) << name;
    EXPECT_FALSE(twin.forbidden) << name;
    test::expect_same_calls(host, twin, name);
    EXPECT_EQ(host.accumulated_in_place, 0) << name << ": selected on the host, A_acc stays on the host";
    if (twin.accumulated_in_place > 0) accumulated_on_device.push_back(name);
    if (twin.scores_in_place > 0) scored_in_buffer.push_back(name);
    EXPECT_EQ(host.scores_in_place, 0) << name << ": selected on the host, the scores are host spans";
    EXPECT_EQ(host.selection_positions_in_place, 0) << name << ": selected on the host, from host positions";
    if (twin.selection_positions_in_place > 0) positions_held.push_back(name);
    EXPECT_EQ(twin.accumulated_in_place > 0, policy->description().needs(TensorSignal::AccumulatedAttention))
        << name;
    EXPECT_EQ(host.codebook_graphs, 0) << name << ": selected on the host, the host builds the graphs";
    EXPECT_EQ(twin.codebook_graphs > 0, policy->description().merge.enabled &&
                                            policy->description().merge.method == MergeMethod::Codebook)
        << name;
    if (twin.codebook_graphs > 0) built_graphs.push_back(name);
  }
  EXPECT_NE(std::find(built_graphs.begin(), built_graphs.end(), "spindlekv"), built_graphs.end());
  std::string names;
  for (const std::string& n : accumulated_on_device) names += n + " ";
  std::printf("built-ins whose A_acc was held on the device: %s\n", names.c_str());
  EXPECT_NE(std::find(accumulated_on_device.begin(), accumulated_on_device.end(), "h2o"), accumulated_on_device.end());
  names.clear();
  for (const std::string& n : scored_in_buffer) names += n + " ";
  std::printf("built-ins whose decode scores were selected from the selector's buffer: %s\n", names.c_str());
  for (const char* n : {"cake", "h2o", "tova"})
    EXPECT_NE(std::find(scored_in_buffer.begin(), scored_in_buffer.end(), n), scored_in_buffer.end()) << n;
  names.clear();
  for (const std::string& n : positions_held) names += n + " ";
  std::printf("built-ins whose selections read the positions the device cache holds: %s\n", names.c_str());
  for (const char* n : {"adakv", "cake", "h2o", "snapkv", "tova"})
    EXPECT_NE(std::find(positions_held.begin(), positions_held.end(), n), positions_held.end()) << n;
}

// The selections from the selector's buffer read the positions where the decoder's device cache
// holds them (LayerSelector::select_heads_from_buffer's `held`; held_selection_input), for the
// per-head top-k (SnapKV, CAKE, H2O), Ada-KV's layer-wide ranking and TOVA's layer-shared rule,
// in the call that hands them over: every decode eviction's (CAKE, H2O, TOVA: each layer at each of
// the 12 steps; DecodingPress every 4th), and of a prompt selected after its last layer (SnapKV's, Ada-KV's) that layer's
// only. Planted positions (each head's in reverse order: the recent window, the sinks and the kept
// order follow positions) change the caches, so the twin selector read the ones handed over (the
// same runs keep the host selection's caches:
// EveryBuiltinScoredAndSelectedOnTheDeviceKeepsTheHostSelectionsCaches).
TEST_F(RowlessEngineTurnTest, DeviceSelectionReadsThePositionsInPlace) {
  const int L = model_->config.n_layers;
  struct Case {
    const char* name;
    std::map<std::string, std::string> params;
    int selections;
  };
  for (const Case& c : std::vector<Case>{{"snapkv", {}, 1},
                                         {"adakv", {}, 1},
                                         {"cake", {}, 12 * L},
                                         {"h2o", {}, 12 * L},
                                         {"tova", {}, 12 * L},
                                         {"decoding", {{"inner", "streaming_llm"}, {"compression_interval", "4"}}, 3 * L}}) {
    const char* name = c.name;
    const int selections = c.selections;
    const auto policy = load_policy(name, c.params);
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
    const Run twin = run(device, TurnMode::Rowless, 12, false, false, {}, true, SelectionDevice::Twin);
    EXPECT_GE(twin.selection_positions_in_place, selections) << name;
    EXPECT_EQ(twin.positions_in_place > 0, policy->description().needs(TensorSignal::Position))
        << name << ": its programs' own reads of the positions";
    const Run planted = run(device, TurnMode::Rowless, 12, false, false, {}, true, SelectionDevice::Twin, true,
                            /*plant_wrong_positions=*/true);
    ASSERT_EQ(planted.layouts.size(), twin.layouts.size()) << name;
    EXPECT_NE(planted.layouts, twin.layouts) << name << " did not select from the positions handed over";
  }
}

// Control: an indicator over the cached keys, its decode reads hidden and its calls unmarked (so the
// engine's own placeholder guard is not told), reads a row of the position-only cache and is
// stopped by the cache's refusal, not by a wrong result.
TEST_F(RowlessEngineTurnTest, ControlARowReaderThrowsOnAPositionOnlyCache) {
  const auto policy = test::key_reading_policy();
  const test::HiddenDecodeReads hidden(*policy);
  ASSERT_EQ(decode_cache_row_reads(hidden.description()), CacheRowReads::None);
  try {
    run(hidden, TurnMode::RowlessUnmarked, 3);
    ADD_FAILURE() << "the keys were read from a cache that holds no row";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("held elsewhere"), std::string::npos) << e.what();
  }
}

// Control: a position-only cache without the norms (a decoder that was not asked for them) makes a
// norm reader fail loudly, naming what is missing, instead of scoring something else.
TEST_F(RowlessEngineTurnTest, ControlNormsNotHandedOverAreRefused) {
  const auto knorm = load_policy("knorm", {});
  ASSERT_TRUE(knorm->description().needs_row_norms());
  ASSERT_NE(prompt_cache_row_reads(knorm->description()), CacheRowReads::Reads);
  try {
    run(*knorm, TurnMode::RowlessWithoutNorms, 0);
    ADD_FAILURE() << "knorm scored a cache that holds neither its rows nor their norms";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("norms were not handed over"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
