// The engine's declaration that a one-token decode step reads no cached key or value
// (ObservationRequest::cache_row_reads.next_token, core/engine/cache_row_reads.h), which lets
// the CUDA decoder hand it a host cache whose decoded rows are placeholders. Proof on the CPU: for
// every built-in policy that evicts while decoding and declares it (H2O's column sums), a run whose observer sees
// every decoded row poisoned (NaN keys and values, restored after the engine's turn) keeps the
// same caches and logits as the plain run. Control: a policy that reads key norms while decoding
// declares that it reads rows, and poisoning its rows changes what it keeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "cache_row_reads_harness.h"
#include "in_place_scoring.h"
#include "stories_prompt_test.h"
#include "lockstep_eviction.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

// In the one-token calls where the engine declared it reads no cached row, acts as the CUDA
// decoder with placeholder rows does: marks the layer's rows as placeholders
// (LayerSignals::cache_rows_are_placeholders, `flag`) and, with `poison`, hands the engine a host
// cache whose rows of decoded tokens (position >= the prompt's length) hold NaN during its turn,
// putting the rows back afterwards (found by position: the engine may have moved or dropped them).
class PoisonDecodedRows : public ForwardObserver {
 public:
  PoisonDecodedRows(EvictionEngine& engine, int prompt_len, bool flag, bool poison)
      : engine_(engine), prompt_len_(prompt_len), flag_(flag), poison_rows_(poison) {}
  ObservationRequest request() const override {
    const ObservationRequest r = engine_.request();
    poison_ = r.cache_row_reads.next_token != CacheRowReads::Reads;
    return r;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    const bool declared = poison_ && signals.n_tokens == 1 && signals.first_position > 0;
    LayerSignals marked = signals;
    marked.cache_rows_are_placeholders = declared && flag_;
    const bool poison = declared && poison_rows_;
    if (poison) poisoned_calls += save_and_poison(cache, signals.layer, signals.layer);
    engine_.after_layer(marked, cache);
    if (poison) restore(cache);
  }
  void after_forward(int n_tokens, KVCache& cache) override {
    const bool poison = poison_ && poison_rows_ && n_tokens == 1;
    if (poison) save_and_poison(cache, 0, cache.n_layers() - 1);
    engine_.after_forward(n_tokens, cache);
    if (poison) restore(cache);
  }
  int64_t poisoned_calls = 0;

 private:
  int save_and_poison(KVCache& cache, int first_layer, int last_layer) {
    poisoner_.poison(cache, first_layer, last_layer, prompt_len_);  // decoded rows only
    return 1;
  }
  void restore(KVCache& cache) { poisoner_.restore(cache); }

  EvictionEngine& engine_;
  const int prompt_len_;
  const bool flag_, poison_rows_;
  mutable bool poison_ = false;  // this call: the engine declared it reads no cached row
  test::CacheRowPoison poisoner_;
};

// As the CUDA decoder hands a device-scoring engine its decode steps: in a one-token call the engine
// declared, the rows are marked as placeholders and, when the request asks for the column sums on
// the device only (ObservationRequest::column_sums_on_device_only), they are handed over as
// "device" memory ([n_heads][max_len], this wrapper's host buffer) with no host copy. `plant`
// reverses each row's entries (a wrong buffer of the right shape).
class DeviceColumnSums : public ForwardObserver {
 public:
  DeviceColumnSums(EvictionEngine& engine, bool plant) : engine_(engine), plant_(plant) {}
  ObservationRequest request() const override {
    request_ = engine_.request();
    return request_;
  }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    LayerSignals with = s;
    const bool declared = request_.cache_row_reads.next_token != CacheRowReads::Reads && s.n_tokens == 1 &&
                          s.first_position > 0;
    with.cache_rows_are_placeholders = declared;
    if (declared && request_.column_sums_on_device_only && s.accumulated_attention) {
      const std::vector<std::vector<float>>& rows = *s.accumulated_attention;
      int64_t max_len = 0;
      for (int h = 0; h < cache.n_kv_heads(); ++h) max_len = std::max<int64_t>(max_len, cache.length(s.layer, h));
      buffer_.assign(rows.size() * static_cast<size_t>(max_len), 0.0f);
      for (size_t h = 0; h < rows.size(); ++h) {
        float* row = buffer_.data() + h * static_cast<size_t>(max_len);
        std::copy(rows[h].begin(), rows[h].end(), row);
        if (plant_) std::reverse(row, row + rows[h].size());
      }
      with.column_sums_on_device = {buffer_.data(), static_cast<int>(rows.size()), max_len};
      with.accumulated_attention = nullptr;
      ++handed;
    }
    engine_.after_layer(with, cache);
  }
  void after_forward(int n_tokens, KVCache& cache) override { engine_.after_forward(n_tokens, cache); }
  int64_t handed = 0;  // layers handed the column sums as device memory only

 private:
  EvictionEngine& engine_;
  const bool plant_;
  mutable ObservationRequest request_;
  std::vector<float> buffer_;
};

struct DecodeRun : test::CallTrace {
  int64_t poisoned_calls = 0;
  // Decode calls after which some head holds fewer entries than before plus the new one: the
  // engine evicted while decoding (so the comparison is not vacuous).
  int decode_evictions() const {
    int n = 0;
    for (size_t i = 1; i < layouts.size(); ++i) {
      bool evicted = false;
      for (size_t l = 0; l < layouts[i].size(); ++l)
        for (size_t h = 0; h < layouts[i][l].size(); ++h)
          evicted = evicted || layouts[i][l][h].size() < layouts[i - 1][l][h].size() + 1;
      n += evicted;
    }
    return n;
  }
};

class DecodeCacheReadsTest : public test::StoriesPromptTest {
 protected:
  // The prompt and `steps` greedy decode steps with the decode steps' column sums handed as "device"
  // memory only (DeviceColumnSums, `plant`: reversed) when `in_place`, else with the engine's
  // declared calls flagged as placeholder rows; `selection` for the engine.
  struct ColumnSumsRun {
    DecodeRun run;
    EvictionReport report;
    int64_t handed = 0;
  };
  static ColumnSumsRun run_with_column_sums(const PolicyProgram& p, bool in_place, bool plant, int steps,
                                            std::optional<SelectionDevice> selection = std::nullopt) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EngineOptions options{Budget::parse("40"), 3};
    options.selection = selection;
    EvictionEngine engine(p, model_->config, options);
    PoisonDecodedRows flagged(engine, S(), /*flag=*/true, /*poison=*/false);
    DeviceColumnSums columns(engine, plant);
    ForwardObserver* observer = in_place ? static_cast<ForwardObserver*>(&columns) : &flagged;
    ColumnSumsRun r;
    r.run.record(decoder->forward(tokens_, observer), decoder->cache());
    r.run.decode_greedily(*decoder, observer, steps);
    r.report = engine.report();
    r.handed = columns.handed;
    return r;
  }
  // The prompt and `steps` greedy decode steps with the engine itself as observer, selecting on
  // `selection` (std::nullopt: the program's own device); its report into `report` when given.
  static DecodeRun run_selected(const PolicyProgram& p, std::optional<SelectionDevice> selection, int steps,
                                EvictionReport* report = nullptr) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EngineOptions options{Budget::parse("40"), 3};
    options.selection = selection;
    EvictionEngine engine(p, model_->config, options);
    DecodeRun r;
    r.record(decoder->forward(tokens_, &engine), decoder->cache());
    r.decode_greedily(*decoder, &engine, steps);
    if (report) *report = engine.report();
    return r;
  }
  enum class Mode { Plain, Flagged, FlaggedAndPoisoned, PoisonedOnly };
  static DecodeRun run(const PolicyProgram& policy, Mode mode, int steps = 40) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(policy, model_->config, {Budget::parse("40"), 3});
    PoisonDecodedRows poisoned(engine, S(), mode == Mode::Flagged || mode == Mode::FlaggedAndPoisoned,
                               mode == Mode::FlaggedAndPoisoned || mode == Mode::PoisonedOnly);
    ForwardObserver* observer = mode != Mode::Plain ? static_cast<ForwardObserver*>(&poisoned) : &engine;
    DecodeRun r;
    r.record(decoder->forward(tokens_, observer), decoder->cache());
    r.decode_greedily(*decoder, observer, steps);
    r.poisoned_calls = poisoned.poisoned_calls;
    return r;
  }
};

// Every built-in policy that evicts while decoding and declares it reads no cached row keeps the
// plain run's caches and logits with its decoded rows poisoned. CAKE and H2O are among them.
TEST_F(DecodeCacheReadsTest, PoliciesThatDeclareNoRowReadsIgnorePoisonedRows) {
  std::vector<std::string> checked;
  for (const std::string& file : builtin_policy_files()) {
    const std::unique_ptr<PolicyProgram> policy = test::load_or_null(file, test::short_prompt_settings(file));
    if (!policy) continue;  // it needs a setting or a model this test does not give it
    const PolicyDescription& d = policy->description();
    // NoneGivenDecoderSignals (the rolling window's A from the decoder) runs with the window
    // attention handed over, on a position-only cache (rowless_engine_turn_test.cpp).
    if (d.run.decode_every <= 0 || decode_cache_row_reads(d) != CacheRowReads::None) continue;
    // Key and value norms come with the positions where the rows are on a device; poisoned rows
    // here would poison them. Those policies, and those re-assigning positions, run on a
    // position-only cache instead (rowless_engine_turn_test.cpp), where a read of a row throws.
    if (d.needs_row_norms()) continue;
    // Re-assigned positions re-number the rows under the poisoner (it finds them by position).
    if (d.run.reassign_positions) continue;
    DecodeRun flagged, poisoned;
    try {
      flagged = run(*policy, Mode::Flagged);
    } catch (const UsageError&) {
      continue;  // refused on this model and budget
    }
    poisoned = run(*policy, Mode::FlaggedAndPoisoned);
    EXPECT_GT(poisoned.poisoned_calls, 0) << file;
    EXPECT_GT(flagged.decode_evictions(), 0) << file << " never evicted while decoding";
    test::expect_same_calls(flagged, poisoned, file);

    checked.push_back(std::filesystem::path(file).stem().string());
  }
  std::string names;
  for (const std::string& n : checked) names += n + " ";
  RecordProperty("checked", names);
  std::printf("policies checked with poisoned rows: %s\n", names.c_str());
  const auto has = [&](const char* name) { return std::find(checked.begin(), checked.end(), name) != checked.end(); };
  EXPECT_TRUE(has("h2o")) << "H2O's decode indicator reads the decoder's column sums, no cached row";
  EXPECT_TRUE(has("cake")) << "CAKE's current-attention indicator takes A_now from the decoder";
  EXPECT_TRUE(has("tova"));
}

// The built-ins that evict while decoding (with their default settings) and read no cached row in
// a decode step: pinned, so that a change that flips one (either way) is seen. Key norms
// (kvpress's decoding presses), StreamingLLM's re-assigned positions and the head plans of
// DuoAttention and RLKV (their streaming heads keep sinks and recent tokens) are among them.
// Those that read the window attention of the rolling window (the last W queries) declare
// NoneGivenDecoderSignals: the decoder computes it from the queries it holds; so do those whose
// merges it runs where the rows are.
TEST_F(DecodeCacheReadsTest, TheBuiltinsThatDeclareNoDecodeRowReads) {
  std::vector<std::string> none, given_window;
  for (const std::string& file : builtin_policy_files()) {
    const std::unique_ptr<PolicyProgram> policy = test::load_or_null(file);
    if (!policy) continue;
    const PolicyDescription& d = policy->description();
    if (d.run.decode_every <= 0) continue;
    const CacheRowReads r = decode_cache_row_reads(d);
    if (r == CacheRowReads::None) none.push_back(std::filesystem::path(file).stem().string());
    if (r == CacheRowReads::NoneGivenDecoderSignals) given_window.push_back(std::filesystem::path(file).stem().string());
  }
  std::sort(none.begin(), none.end());
  std::sort(given_window.begin(), given_window.end());
  const std::vector<std::string> expect = {"cake",     "compression_ratio_decoding", "decoding", "duo_attention", "h2o",
                                           "prefill_decoding", "rlkv", "streamingllm", "tova"};
  EXPECT_EQ(none, expect);
  // The window attention (morphkv, scissorhands) or the merges run where the rows are (cam, d2o).
  const std::vector<std::string> expect_given_window = {"cam", "d2o", "morphkv", "scissorhands"};
  EXPECT_EQ(given_window, expect_given_window);
  // CAKE's paper indicator (mean + gamma * variance over the rolling window).
  EXPECT_EQ(decode_cache_row_reads(load_policy("cake", {{"decode_indicator", "mean_plus_gamma_var"}})->description()),
            CacheRowReads::NoneGivenDecoderSignals);
  // DMS evicts while decoding only with decoding=true: then over key norms too.
  EXPECT_EQ(decode_cache_row_reads(load_policy("dms", {{"decoding", "true"}})->description()), CacheRowReads::None);
}

// Scored on the decoder's device, K, V and their norms count as handed over (CachedRowSignals::
// GivenOnDevice): R-KV's decode triggers (its keys' redundancy, the rolling window's A) then read no
// row on the host; kvpress's decoding presses, which read no row already (the norms held with the
// positions on the host), take their norms from the decoder instead (NoneGivenDecoderSignals). No
// built-in's decode steps read rows then: the merges of CAM and D2O run where the rows are
// (merge_given_by_decoder) whoever scores.
TEST_F(DecodeCacheReadsTest, TheBuiltinsWhoseDecodeStepsReadOnlyKAndVFromTheDevice) {
  std::vector<std::string> given_rows, given_norms, still_reads;
  for (const std::string& file : builtin_policy_files()) {
    const std::unique_ptr<PolicyProgram> policy = test::load_or_null(file);
    if (!policy) continue;
    const PolicyDescription& d = policy->description();
    if (d.run.decode_every <= 0) continue;
    const std::string name = std::filesystem::path(file).stem().string();
    const CacheRowReads host = decode_cache_row_reads(d);
    const CacheRowReads device = decode_cache_row_reads(d, CachedRowSignals::GivenOnDevice);
    if (device == CacheRowReads::Reads) still_reads.push_back(name);
    if (host == device) continue;
    EXPECT_EQ(device, CacheRowReads::NoneGivenDecoderSignals) << name;
    if (host == CacheRowReads::Reads) {
      given_rows.push_back(name);
    } else {
      EXPECT_EQ(host, CacheRowReads::None) << name;
      EXPECT_TRUE(d.needs_row_norms()) << name;
      given_norms.push_back(name);
    }
  }
  std::sort(given_rows.begin(), given_rows.end());
  std::sort(given_norms.begin(), given_norms.end());
  std::sort(still_reads.begin(), still_reads.end());
  EXPECT_EQ(given_rows, std::vector<std::string>{"rkv"});
  EXPECT_EQ(given_norms, (std::vector<std::string>{"compression_ratio_decoding", "decoding", "prefill_decoding"}));
  EXPECT_EQ(still_reads, std::vector<std::string>{});
}

// A_now taken from the decoder's column sums (placeholder rows) instead of computed on the host
// from the cached keys: the same math in another order, so the caches may part, but only on near
// ties (tests/core/lockstep_eviction.h), with identical logits while they agree. H2O reads no A_now
// and keeps exactly the same caches.
TEST_F(DecodeCacheReadsTest, DecodersCurrentAttentionPartsFromTheHostsOnlyOnNearTies) {
  for (const char* name : {"cake", "tova", "h2o"}) {
    const auto policy = load_policy(name, {});
    EngineOptions options{Budget::parse("40"), 3};
    options.trace_selection = true;
    auto a = make_cpu_decoder(*model_, {.threads = 1}), b = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine ea(*policy, model_->config, options), eb(*policy, model_->config, options);
    PoisonDecodedRows flagged(eb, S(), /*flag=*/true, /*poison=*/false);
    test::LockstepOutcome outcome;
    EXPECT_TRUE(test::eviction_in_lockstep(*a, ea, *b, eb, tokens_, 40, [](const std::vector<float>&) { return 0.0f; },
                                           &outcome, &flagged))
        << name;
    std::printf("%s: %d calls on the same caches\n", name, outcome.same_cache_steps);
    if (std::string(name) == "h2o") {
      EXPECT_EQ(outcome.same_cache_steps, 41) << "H2O reads no A_now";
    }
  }
}

// A_now in place: scored on the device (a stand-in device backend), CAKE's and TOVA's decode steps
// read the decoder's device column sums where they are (ObservationRequest::column_sums_on_device_only:
// no host copy, no download, no upload), with the caches and logits of the run that copies them on
// the host; a planted buffer changes them. H2O accumulates the sums on the host and does not ask.
TEST_F(DecodeCacheReadsTest, DeviceScoringReadsTheDecodersColumnSumsInPlace) {
  const int heads = model_->config.n_layers * model_->config.n_kv_heads, steps = 20;
  for (const char* name : {"cake", "tova"}) {
    const auto policy = load_policy(name, {});
    const test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
    const DecodeRun host = run_with_column_sums(*policy, false, false, steps).run;
    const ColumnSumsRun device_run = run_with_column_sums(device, true, false, steps);
    const DecodeRun& in_place = device_run.run;
    const EvictionReport& report = device_run.report;
    EXPECT_EQ(device_run.handed, int64_t{steps} * model_->config.n_layers) << name;
    EXPECT_GE(report.current_attention_in_place, int64_t{heads}) << name << ": the last step's heads";
    EXPECT_EQ(report.current_attention_downloads, 0) << name;
    EXPECT_GE(device.scored_current_in_place, int64_t{steps} * heads) << name;
    EXPECT_GT(host.decode_evictions(), 0) << name;
    test::expect_same_calls(host, in_place, name);
    const DecodeRun planted = run_with_column_sums(device, true, true, steps).run;
    EXPECT_NE(planted.layouts, in_place.layouts) << name << ": the device column sums were not read";
  }
  const auto h2o = load_policy("h2o", {});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  const test::InPlaceScoring device(*h2o, true);
  EvictionEngine engine(device, model_->config, {Budget::parse("40"), 3});
  decoder->forward(tokens_, &engine);
  EXPECT_FALSE(engine.request().column_sums_on_device_only)
      << "selected on the host, H2O accumulates the column sums on the host";
}

// A_acc on the device: scored there (the stand-in device backend) and selected there (the twin
// selector, so the accumulation is held by the twin store: accumulated_attention_store.h), H2O adds
// every decode step's column sums where the decoder left them (handed as "device" memory only,
// no host copy) and hands the kernels each head's A_acc in place, with the caches and logits of the
// run that accumulates on the host. A planted (reversed) buffer changes them.
TEST_F(DecodeCacheReadsTest, DeviceScoringAccumulatesTheDecodersColumnSumsInPlace) {
  const int layers = model_->config.n_layers, heads = layers * model_->config.n_kv_heads, steps = 20;
  const auto h2o = load_policy("h2o", {});
  const test::InPlaceScoring device(*h2o, /*layers_on_device=*/true);
  {
    EvictionEngine probe(device, model_->config, {Budget::parse("40"), 3, false, SelectionDevice::Twin});
    EXPECT_TRUE(probe.request().column_sums_on_device_only);
  }
  const DecodeRun host = run_with_column_sums(*h2o, false, false, steps).run;
  const ColumnSumsRun device_run = run_with_column_sums(device, true, false, steps, SelectionDevice::Twin);
  const DecodeRun& in_place = device_run.run;
  const EvictionReport& report = device_run.report;
  EXPECT_EQ(device_run.handed, int64_t{steps} * layers);
  EXPECT_EQ(report.accumulated_attention_device_adds, int64_t{steps} * layers) << "every decode step's sums";
  EXPECT_GE(report.accumulated_attention_in_place, int64_t{steps} * heads);
  EXPECT_GE(device.scored_accumulated_in_place, int64_t{steps} * heads);
  EXPECT_EQ(report.current_attention_downloads, 0);
  EXPECT_GE(report.scores_in_place, int64_t{steps} * heads) << "scored into the twin selector's buffer";
  EXPECT_GT(host.decode_evictions(), 0);
  test::expect_same_calls(host, in_place, "h2o");
  const DecodeRun planted = run_with_column_sums(device, true, true, steps, SelectionDevice::Twin).run;
  EXPECT_NE(planted.layouts, in_place.layouts) << "the device column sums were not accumulated";
}

// Decode scores written where the selection reads them: scored on the device (the stand-in device
// backend) and selected there (the twin selector), CAKE's and H2O's per-head decode evictions,
// TOVA's layer-shared one (on the heads' mean, made where the buffer is) and D2O's (whose merge
// reads the kept lists, not the scores: merge_reads_selection_scores) write each head's scores
// into the selector's buffer (PolicyProgram::score_on_device, LayerSelector::layer_score_buffer)
// and select from it, with the caches and logits of the run scored and selected on the host.
// Planted (negated) scores in the buffer change the caches.
TEST_F(DecodeCacheReadsTest, DeviceScoringWritesDecodeScoresWhereTheSelectionReadsThem) {
  const int heads = model_->config.n_layers * model_->config.n_kv_heads, steps = 12;
  for (const char* name : {"cake", "h2o", "tova", "d2o"}) {
    const auto policy = load_policy(name, {});
    test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
    EvictionReport report;
    const DecodeRun host = run_selected(*policy, std::nullopt, steps);
    const DecodeRun in_buffer = run_selected(device, SelectionDevice::Twin, steps, &report);
    EXPECT_GT(host.decode_evictions(), 0) << name;
    test::expect_same_calls(host, in_buffer, name);
    EXPECT_GE(report.scores_in_place, int64_t{steps} * heads) << name;
    EXPECT_EQ(report.prefill_scores_in_place, heads) << name << ": the prompt's scores were held there too";
    EXPECT_EQ(device.scored_to_device, report.scores_in_place + report.prefill_scores_in_place) << name;
    device.plant_device_scores = true;
    const DecodeRun planted = run_selected(device, SelectionDevice::Twin, steps);
    device.plant_device_scores = false;
    EXPECT_NE(planted.layouts, in_buffer.layouts) << name << ": the buffer's scores were not what was selected from";
  }
}

// Control: CaM ranks its merge candidates by the scores the selection ranked (MergeContext::scores,
// merge_reads_selection_scores), so its decode scores come to the host even when they are made on
// the device and selected there, with the host run's caches and logits. Held in the selector, the
// merge would find no scores (merge_cam refuses them).
TEST_F(DecodeCacheReadsTest, AMergeThatReadsTheScoresKeepsThemOnTheHost) {
  const int steps = 12;
  const auto cam = load_policy("cam", {{"compression_interval", "4"}});
  test::InPlaceScoring device(*cam, /*layers_on_device=*/true);
  EvictionReport report;
  const DecodeRun host = run_selected(*cam, std::nullopt, steps);
  const DecodeRun twin = run_selected(device, SelectionDevice::Twin, steps, &report);
  EXPECT_GT(host.decode_evictions(), 0);
  test::expect_same_calls(host, twin, "cam");
  EXPECT_EQ(report.scores_in_place, 0);
  EXPECT_EQ(report.prefill_scores_in_place, 0);
}

// A prompt's scores held where the selection reads them: scored on the device (the stand-in device
// backend) and selected there (the twin selector), each layer's prompt scores are written into the
// selector's buffer of that layer and wait there for the layer's selection: one at the last layer,
// or (CAKE cascading) one at every later layer, the buffer following the cache through each keep
// (LayerSelector::keep_in_buffer). Ada-KV's layer-wide ranking reads the layer's buffer as a whole.
// The caches and logits after the prompt and 4 decoded tokens are those of the run scored and
// selected on the host; planted (negated) scores change them.
TEST_F(DecodeCacheReadsTest, DeviceScoringHoldsThePromptsScoresWhereTheSelectionReadsThem) {
  const int heads = model_->config.n_layers * model_->config.n_kv_heads, steps = 4;
  struct Case {
    const char* name;
    std::map<std::string, std::string> params;
    bool held;
  };
  for (const Case& c : {Case{"snapkv", {}, true}, Case{"pyramidkv", {}, true}, Case{"cake", {}, true},
                        Case{"cake", {{"cascading", "true"}}, true}, Case{"tova", {}, true}, Case{"knorm", {}, true},
                        Case{"adakv", {}, true}, Case{"kvmerger", {}, true}, Case{"look_m", {}, true},
                        Case{"merging_press", {}, true}}) {
    const std::string name = std::string(c.name) + (c.params.empty() ? "" : " cascading");
    const auto policy = load_policy(c.name, c.params);
    test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
    EvictionReport report;
    const DecodeRun host = run_selected(*policy, std::nullopt, steps);
    const DecodeRun in_buffer = run_selected(device, SelectionDevice::Twin, steps, &report);
    ASSERT_TRUE(report.prefill_evicted) << name;
    test::expect_same_calls(host, in_buffer, name);
    EXPECT_EQ(report.prefill_scores_in_place, c.held ? heads : 0) << name;
    if (!c.held) continue;
    // The prompt alone: every stage selected its layers from the held scores (layer 0 at each of the L
    // stages of a cascading prompt, layer L - 1 once).
    const int L = model_->config.n_layers;
    EvictionReport prompt;
    const DecodeRun prompt_only = run_selected(device, SelectionDevice::Twin, 0, &prompt);
    EXPECT_EQ(prompt.layer_selections, c.params.empty() ? L : L * (L + 1) / 2) << name;
    EXPECT_EQ(prompt.prefill_scores_in_place, heads) << name;
    device.plant_device_scores = true;
    const DecodeRun planted = run_selected(device, SelectionDevice::Twin, 0);
    device.plant_device_scores = false;
    EXPECT_NE(planted.layouts, prompt_only.layouts) << name << ": the held scores were not what was selected from";
  }
}

// Controls: a prompt whose scores the host reads after the selection keeps them on the host, with
// the host run's caches and logits: frozen scores (select.score_at: insertion, kept for the decode
// steps), the mass allocation (each layer's budget from its prompt scores) and unfolded GQA (each
// query head selected from its own scores). Held in the selector, each would read empty host scores.
TEST_F(DecodeCacheReadsTest, PromptScoresThatTheHostReadsStayOnTheHost) {
  const std::string head = "name: p\nabout: x\nobserve: {window: 8}\nprotect: {recent: 8}\n";
  const std::string a_sum = "score: |\n  score[t] = mean(h: sum(q: A[h, q, t]))\n";
  struct Case {
    std::string name;
    std::unique_ptr<PolicyProgram> policy;
  };
  std::vector<Case> cases;
  cases.push_back({"frozen", std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_text(
                                 "frozen.yaml", head + "run: {prefill: true, decode_every: 1}\n"
                                                       "select: {score_at: insertion}\n" + a_sum))});
  cases.push_back({"mass", std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_text(
                               "mass.yaml", head + "select: {layer_allocation: mass, mass: 0.9}\n" + a_sum))});
  cases.push_back({"spindlekv unfold", load_policy("spindlekv", {{"gqa_mode", "unfold"}})});
  for (const Case& c : cases) {
    test::InPlaceScoring device(*c.policy, /*layers_on_device=*/true);
    EvictionReport report;
    const DecodeRun host = run_selected(*c.policy, std::nullopt, 4);
    const DecodeRun twin = run_selected(device, SelectionDevice::Twin, 4, &report);
    ASSERT_TRUE(report.prefill_evicted) << c.name;
    test::expect_same_calls(host, twin, c.name);
    EXPECT_EQ(report.prefill_scores_in_place, 0) << c.name;
  }
}

// A program that scores on a CUDA device (its memory is that device's) with the twin selector (host
// memory): the twin's score buffer and its A_acc store are no memory the program may write or read,
// so the decode scores come back to the host and A_acc is summed on the host, with the caches and
// logits of the run scored and selected on the host.
TEST_F(DecodeCacheReadsTest, ACudaProgramWithTheTwinSelectorWritesNothingIntoTheTwinsMemory) {
  struct CudaStandIn : test::InPlaceScoring {
    using InPlaceScoring::InPlaceScoring;
    SelectionDevice selection_device() const override { return SelectionDevice::Cuda; }
  };
  const int steps = 8;
  for (const char* name : {"h2o", "cake"}) {
    const auto policy = load_policy(name, {});
    const CudaStandIn device(*policy, /*layers_on_device=*/true);
    {
      const EvictionEngine probe(device, model_->config, {Budget::parse("40"), 3, false, SelectionDevice::Twin});
      EXPECT_FALSE(probe.request().column_sums_on_device_only) << name;
    }
    EvictionReport report;
    const DecodeRun host = run_selected(*policy, std::nullopt, steps);
    const DecodeRun twin = run_selected(device, SelectionDevice::Twin, steps, &report);
    EXPECT_GT(host.decode_evictions(), 0) << name;
    test::expect_same_calls(host, twin, name);
    EXPECT_EQ(report.scores_in_place, 0) << name;
    EXPECT_EQ(report.accumulated_attention_in_place, 0) << name;
    EXPECT_EQ(device.scored_to_device, 0) << name;
  }
}

// Controls: a decode indicator over the cached keys reads cached rows: it says so, and poisoning the
// rows (as if a decoder had left placeholders) changes what it keeps. TOVA's A_now is computed from
// the cached keys unless the rows are marked as placeholders: poisoned but unmarked, it changes.
TEST_F(DecodeCacheReadsTest, ControlARowReaderDeclaresItAndPoisonChangesItsCache) {
  const auto policy = test::key_reading_policy();
  EXPECT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::Reads);
  // The harness poisons only when the engine declares no reads: force it through a copy of the
  // description that hides K, which is exactly the mistake the declaration must not make.
  const test::HiddenDecodeReads hidden(*policy);
  ASSERT_EQ(decode_cache_row_reads(hidden.description()), CacheRowReads::None);
  const DecodeRun plain = run(hidden, Mode::Plain), poisoned = run(hidden, Mode::PoisonedOnly);
  EXPECT_GT(poisoned.poisoned_calls, 0);
  EXPECT_NE(plain.layouts.back(), poisoned.layouts.back()) << "the poisoned keys were not read";
  // Marked as placeholders, the engine makes only the signals the (hidden) declaration names: the
  // indicator's read of K then fails loudly instead of reading the rows.
  EXPECT_ANY_THROW(run(hidden, Mode::Flagged));
  const auto tova = load_policy("tova", {});
  EXPECT_EQ(decode_cache_row_reads(tova->description()), CacheRowReads::None);
  const DecodeRun tova_plain = run(*tova, Mode::Plain), tova_poisoned = run(*tova, Mode::PoisonedOnly);
  EXPECT_GT(tova_poisoned.poisoned_calls, 0);
  EXPECT_NE(tova_plain.layouts.back(), tova_poisoned.layouts.back()) << "TOVA's host A_now did not read the poisoned keys";
}

TEST(DecodeCacheReads, SourcesAndFeaturesThatReadRows) {
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::LatestQuery));
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::ColumnSums));
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::Positions));
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::RowNorms)) << "held with the positions";
  EXPECT_TRUE(signal_source_reads_cache_rows(SignalSource::CachedKeys));
  EXPECT_TRUE(signal_source_reads_cache_rows(SignalSource::WindowQueries));
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::WindowQueryRows)) << "the queries alone";
  EXPECT_FALSE(signal_source_reads_cache_rows(SignalSource::RopeRotation));
  PolicyDescription d;  // hand-made: decode_reads unknown, decode window attention assumed
  EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::Reads);
  d.decode_reads_known = true;
  d.run.decode_uses_window_attention = false;
  d.decode_reads[signal_index(TensorSignal::AccumulatedAttention)] = true;
  EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::None);
  PolicyDescription merged = d;
  merged.merge.enabled = true;
  EXPECT_EQ(decode_cache_row_reads(merged), CacheRowReads::Reads);
  PolicyDescription reassigned = d;
  reassigned.run.reassign_positions = true;  // the holder of the rows re-rotates them (on a device: the mirror)
  EXPECT_EQ(decode_cache_row_reads(reassigned), CacheRowReads::None);
  d.decode_reads[signal_index(TensorSignal::KeyNorm)] = true;
  d.decode_reads[signal_index(TensorSignal::ValueNorm)] = true;
  EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::None);
  d.decode_reads[signal_index(TensorSignal::Values)] = true;
  EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::Reads);
}

// The rolling window's A: from the decoder, causal or not (NACL's official proxy), whatever the
// window was found from (it is the prompt's by then); NACL's same-index map and a key read are
// read on the host.
TEST(DecodeCacheReads, TheRollingWindowsAttentionIsTheDecodersWhenItCanComputeIt) {
  PolicyDescription d;
  d.decode_reads_known = true;
  d.window = 8;
  d.run.decode_uses_window_attention = true;
  d.decode_reads[signal_index(TensorSignal::WindowAttention)] = true;
  d.decode_reads[signal_index(TensorSignal::Position)] = true;
  EXPECT_EQ(decode_cache_row_reads(d), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription noncausal = d;
  noncausal.observe.causal = false;  // NACL's proxy
  EXPECT_EQ(decode_cache_row_reads(noncausal), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription same_index = d;
  same_index.observe.same_index_head = true;
  EXPECT_EQ(decode_cache_row_reads(same_index), CacheRowReads::Reads);
  PolicyDescription found = d;
  found.observe.window_after_token = 5;  // the window is found from the prompt's tokens
  EXPECT_EQ(decode_cache_row_reads(found), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription keys = d;
  keys.decode_reads[signal_index(TensorSignal::Keys)] = true;
  EXPECT_EQ(decode_cache_row_reads(keys), CacheRowReads::Reads);
}

}  // namespace
}  // namespace kvevict
