// The CUDA scoring backend reads the CUDA decoder's window attention in place (ScoreInputs::
// device_signals, PrecomputedWindow::in_place; docs/CUDA.md "Not done" step 2): SnapKV's prefill
// scored by the NVRTC kernels from the device buffer, with nothing downloaded, keeps the cache the
// interpreter keeps from the same decoder's signals. GPU only: skipped with the reason without one.
// The CPU proof of the engine's side: WindowAttentionEngineTest.DeviceScoringReadsTheDecodersBufferInPlace.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../core/cache_row_reads_harness.h"
#include "../core/gpu_test_skip.h"
#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"
#include "core/decode/make_decoder.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/model/synthetic_model.h"
#include "dsl/policy_loader.h"
#include "jit/device.h"
#include "jit/scoring_backend.h"

namespace kvevict {
namespace {

ModelConfig in_place_config() {
  ModelConfig c;
  c.name = "in-place-test";
  c.n_layers = 3, c.dim = 96, c.n_heads = 6, c.n_kv_heads = 2, c.head_dim = 16, c.hidden_dim = 160;
  c.vocab_size = 300, c.context_length = 512;
  return c;
}

struct Outcome {
  std::vector<std::vector<std::vector<int32_t>>> positions;  // [layer][KV head] in cache order
  EvictionReport report;
  DeviceKvStats stats;  // before anything brought rows to the host
};

// The engine as it is, but saying that every call reads the cached rows: the host cache takes them
// all, and device scoring uploads K and V from there.
class ReadsRows final : public ForwardObserver {
 public:
  explicit ReadsRows(EvictionEngine& engine) : engine_(engine) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine_.request();
    r.cache_row_reads = {};
    return r;
  }
  void after_layer(const LayerSignals& s, KVCache& c) override { engine_.after_layer(s, c); }
  void after_forward(int n, KVCache& c) override { engine_.after_forward(n, c); }

 private:
  EvictionEngine& engine_;
};

// The engine as it is, but asking for the block's attention inputs on the host: the CUDA decoder
// then downloads them, the engine gathers them, and device scoring uploads them per head.
class HostHiddenStates final : public ForwardObserver {
 public:
  explicit HostHiddenStates(EvictionEngine& engine) : engine_(engine) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine_.request();
    r.hidden_states_on_device = false;
    return r;
  }
  void after_layer(const LayerSignals& s, KVCache& c) override { engine_.after_layer(s, c); }
  void after_forward(int n, KVCache& c) override { engine_.after_forward(n, c); }

 private:
  EvictionEngine& engine_;
};

// The prompt, then the decode steps `tokens` (one token each), with the engine observing every
// call (through ReadsRows when `rows_on_host`, HostHiddenStates when `hidden_on_host`); the
// positions afterwards in cache order.
Outcome run(const Model& model, const PolicyProgram& program, const std::vector<int>& prompt,
            const std::vector<int>& tokens = {}, bool rows_on_host = false, bool hidden_on_host = false) {
  auto decoder = make_decoder(model, DecoderDevice::Cuda, {});
  EvictionEngine engine(program, model.config, {Budget::parse("40"), 0});
  ReadsRows reads(engine);
  HostHiddenStates host_hidden(engine);
  ForwardObserver* observer = rows_on_host     ? static_cast<ForwardObserver*>(&reads)
                              : hidden_on_host ? static_cast<ForwardObserver*>(&host_hidden)
                                               : &engine;
  decoder->forward(prompt, observer);
  for (int t : tokens) decoder->forward(std::vector<int>{t}, observer);
  Outcome o;
  o.stats = decoder->device_kv_stats();
  const KVCache& cache = decoder->cache();
  o.positions.resize(cache.n_layers());
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      o.positions[l].emplace_back(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h));
  o.report = engine.report();
  return o;
}

TEST(WindowAttentionInPlaceGpu, CudaScoringReadsTheDecodersBufferInPlace) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(in_place_config(), 43);
  std::vector<int> prompt(160);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 29 + 3) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  for (const char* name : {"snapkv", "adakv"}) {
    const auto on_device = jit::load_scored_policy(name, {}, {}, jit::ScoringBackend::CudaKernel, device);
    const auto interpreted = load_policy(name, {});
    ASSERT_TRUE(on_device->scores_device_signals()) << name;
    const Outcome gpu = run(*model, *on_device, prompt);
    const Outcome cpu = run(*model, *interpreted, prompt);
    const int heads = model->config.n_layers * model->config.n_kv_heads;
    EXPECT_GE(gpu.report.window_attention_in_place, heads) << name;
    EXPECT_EQ(gpu.report.window_attention_downloads, 0) << name;
    EXPECT_EQ(cpu.report.window_attention_in_place, 0) << name;  // the interpreter is handed host copies
    // The prompt's scores written where the selection reads them (per-head top-k, Ada-KV's ranking).
    EXPECT_EQ(gpu.report.prefill_scores_in_place, heads) << name;
    EXPECT_EQ(cpu.report.prefill_scores_in_place, 0) << name;
    EXPECT_GT(cpu.report.window_attention_downloads, 0) << name;
    // Same signals, the generated kernel against the interpreter (equal to the bit on the H200),
    // the same tie rule: the same kept entries in the same order.
    EXPECT_EQ(gpu.positions, cpu.positions) << name;
  }
}

// While decoding: CAKE's and TOVA's A_now read in place from the decoder's device column sums
// (ObservationRequest::column_sums_on_device_only: no host copy, no download), Scissorhands' and
// MorphKV's rolling window attention read in place from the decoder's buffer; the same kept entries
// in the same order as the interpreter scoring host copies of the same signals. MorphKV's score
// goes through logf and expf, whose GPU results may differ from the host's in the last bits (the
// codegen tests allow 5e-5), so a near tie at a head's budget may flip there: its kept entries are
// compared as sets that may differ by a few (a wrong A read in place changes most of them).
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsTheDecodeStepsSignalsInPlace) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(in_place_config(), 47);
  std::vector<int> prompt(120), tokens(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 31 + 5) % 300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 17 + 11) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  const int heads = model->config.n_layers * model->config.n_kv_heads;
  for (const char* name : {"cake", "tova", "scissorhands", "morphkv"}) {
    const bool rolling_window = std::string(name) == "scissorhands" || std::string(name) == "morphkv";
    const auto on_device = jit::load_scored_policy(name, {}, {}, jit::ScoringBackend::CudaKernel, device);
    const auto interpreted = load_policy(name, {});
    const Outcome gpu = run(*model, *on_device, prompt, tokens);
    const Outcome cpu = run(*model, *interpreted, prompt, tokens);
    if (rolling_window) {
      EXPECT_GE(gpu.report.window_attention_in_place, heads) << name << ": the last step's heads";
      EXPECT_EQ(gpu.report.window_attention_downloads, 0) << name;
    } else {
      EXPECT_GE(gpu.report.current_attention_in_place, heads) << name << ": the last step's heads";
      EXPECT_EQ(gpu.report.current_attention_downloads, 0) << name;
      EXPECT_EQ(cpu.report.current_attention_in_place, 0) << name;
    }
    // CAKE's per-head and TOVA's layer-shared decode evictions select from the scores the kernels
    // left on the device (TOVA's mean made there too).
    if (!rolling_window) {
      EXPECT_GE(gpu.report.scores_in_place, heads) << name;
    }
    if (std::string(name) != "morphkv") {
      EXPECT_EQ(gpu.positions, cpu.positions) << name;
      continue;
    }
    ASSERT_EQ(gpu.positions.size(), cpu.positions.size());
    size_t kept = 0, differing = 0;
    for (size_t l = 0; l < cpu.positions.size(); ++l)
      for (size_t h = 0; h < cpu.positions[l].size(); ++h) {
        std::vector<int32_t> a = cpu.positions[l][h], b = gpu.positions[l][h];
        ASSERT_EQ(a.size(), b.size()) << name << " layer " << l << " head " << h;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        std::vector<int32_t> only;
        std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only));
        kept += a.size();
        differing += only.size();
      }
    EXPECT_LE(differing * 50, kept) << name << ": " << differing << " of " << kept << " kept entries differ";
  }
}

// H2O's A_acc accumulated on the device (core/engine/accumulated_attention_store.h): every block's
// column sums added where the decoder left them (no host copy), each head's A_acc handed to the
// NVRTC kernel in place; the same kept entries in the same order as the interpreter accumulating
// host copies of the same sums (one float add per block on both sides). D2O scores the same way
// and merges every evicted entry on the device cache; its merge reads the kept lists only
// (merge_reads_selection_scores), so its decode scores stay in the selector's buffer too.
TEST(WindowAttentionInPlaceGpu, CudaScoringAccumulatesTheColumnSumsOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(in_place_config(), 59);
  std::vector<int> prompt(120), tokens(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 41 + 3) % 300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 19 + 7) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  const int layers = model->config.n_layers, heads = layers * model->config.n_kv_heads;
  for (const char* name : {"h2o", "d2o"}) {
    const auto on_device = jit::load_scored_policy(name, {}, {}, jit::ScoringBackend::CudaKernel, device);
    const auto interpreted = load_policy(name, {});
    const Outcome gpu = run(*model, *on_device, prompt, tokens);
    const Outcome cpu = run(*model, *interpreted, prompt, tokens);
    // At least one add per layer and call, every one from device sums (the decoder made no host copy).
    EXPECT_GE(gpu.report.accumulated_attention_device_adds, int64_t(1 + tokens.size()) * layers) << name;
    EXPECT_GE(gpu.report.accumulated_attention_in_place, int64_t(tokens.size()) * heads) << name;
    EXPECT_EQ(cpu.report.accumulated_attention_in_place, 0) << name;
    // The decode scores went straight into the CUDA selector's buffer (no download, no upload).
    EXPECT_GE(gpu.report.scores_in_place, int64_t(tokens.size()) * heads) << name;
    EXPECT_EQ(cpu.report.scores_in_place, 0) << name;
    EXPECT_EQ(gpu.positions, cpu.positions) << name;
  }
}

// K and V read in place (LayerSignals::cache_rows, ObservationRequest::cache_keys_on_device): R-KV
// (at the prompt and every 4th decode step: its last 8 queries' window attention, its keys'
// redundancy) and KeyDiff (its prompt's keys) scored by the NVRTC kernels from the decoder's device
// copy of the cached rows, with the host cache holding placeholders, keep exactly the entries of
// the same kernels scoring K and V uploaded from a host cache that took every row (the same f32
// values: both convert the stored words alike).
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsTheCachedRowsInPlace) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(in_place_config(), 53);
  std::vector<int> prompt(120), tokens(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 37 + 7) % 300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 13 + 5) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  const int heads = model->config.n_layers * model->config.n_kv_heads;
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"rkv", {{"decode_interval", "4"}}}, {"keydiff", {}}}) {
    const auto on_device = jit::load_scored_policy(name, params, {}, jit::ScoringBackend::CudaKernel, device);
    const Outcome in_place = run(*model, *on_device, prompt, tokens);
    const Outcome from_host = run(*model, *on_device, prompt, tokens, /*rows_on_host=*/true);
    EXPECT_GE(in_place.report.cache_rows_in_place, heads) << name;
    EXPECT_EQ(from_host.report.cache_rows_in_place, 0) << name;
    EXPECT_GT(in_place.stats.counts.rows_placeholder, 0) << name;
    EXPECT_EQ(from_host.stats.counts.rows_placeholder, 0) << name;
    EXPECT_EQ(in_place.positions, from_host.positions) << name;
  }
}

// KVzap's hidden[c, t] read in place (LayerSignals::hidden_states_on_device): on stories260K (the
// shape of its example tables), its prompt and 12 decode steps (each scoring its new entry alone)
// scored by the NVRTC kernels from the block the decoder transposed on its device keep exactly the
// entries of the same kernels fed the rows downloaded, gathered on the host and uploaded per head
// (the same f32 bits, summed in the same order).
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsKvzapsHiddenStatesInPlace) {
  SKIP_WITHOUT_GPU();
  if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto model = load_model(test::stories_checkpoint());
  const std::vector<int> prompt = model->tokenizer->encode(test::kPolicyTestStory, true);
  std::vector<int> tokens(12);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 13 + 5) % model->config.vocab_size);
  const auto kvzap = jit::load_scored_policy("kvzap", {{"sliding_window_size", "16"}, {"decoding", "true"}}, {},
                                             jit::ScoringBackend::CudaKernel, jit::resolve_device("cuda"));
  const Outcome in_place = run(*model, *kvzap, prompt, tokens);
  const Outcome from_host = run(*model, *kvzap, prompt, tokens, false, /*hidden_on_host=*/true);
  const int64_t heads = int64_t{model->config.n_layers} * model->config.n_kv_heads;
  EXPECT_EQ(in_place.report.hidden_states_in_place, int64_t(tokens.size() + 1) * heads);
  EXPECT_EQ(in_place.report.hidden_state_floats_peak, 0);
  EXPECT_EQ(from_host.report.hidden_states_in_place, 0);
  EXPECT_GT(from_host.report.hidden_state_floats_peak, 0);
  EXPECT_EQ(in_place.positions, from_host.positions);
}

// At least 95% of the entries `expected` keeps per (layer, head) are kept by `got` too: for inputs
// that agree to float rounding only, whose kept sets may part on scores tied within it (wrong keys,
// positions or heads keep about the budget's share of them, 40 of 120 here).
void expect_mostly_the_same_kept(const Outcome& got, const Outcome& expected, const std::string& name) {
  size_t kept = 0, same = 0;
  for (size_t l = 0; l < expected.positions.size(); ++l)
    for (size_t h = 0; h < expected.positions[l].size(); ++h) {
      std::vector<int32_t> a = got.positions[l][h], b = expected.positions[l][h];
      ASSERT_EQ(a.size(), b.size()) << name << " layer " << l << " head " << h;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      std::vector<int32_t> both;
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
      kept += b.size();
      same += both.size();
    }
  ASSERT_GT(kept, 0u) << name;
  EXPECT_GE(double(same), 0.95 * double(kept)) << name << ": " << same << " of " << kept << " kept entries the same";
}

// `policy`'s prompt (120 tokens, `stride` and `offset` making them) scored by the NVRTC kernels from
// the cached-row signals the decoder makes on its device, while the host cache holds placeholders,
// against the same kernels scoring the signals the engine made from a host cache that took every
// row: at least 95% of the kept entries the same (the two agree to float rounding only).
void expect_device_made_rows_keep_the_hosts(const std::string& policy, uint64_t seed, int stride, int offset) {
  const auto model = make_random_model(in_place_config(), seed);
  std::vector<int> prompt(120);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * stride + offset) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  const int heads = model->config.n_layers * model->config.n_kv_heads;
  const auto on_device = jit::load_scored_policy(policy, {}, {}, jit::ScoringBackend::CudaKernel, device);
  const Outcome in_place = run(*model, *on_device, prompt);
  const Outcome from_host = run(*model, *on_device, prompt, {}, /*rows_on_host=*/true);
  EXPECT_GE(in_place.report.cache_rows_in_place, heads) << policy;
  EXPECT_EQ(from_host.report.cache_rows_in_place, 0) << policy;
  EXPECT_GT(in_place.stats.counts.rows_placeholder, 0) << policy;
  expect_mostly_the_same_kept(in_place, from_host, policy);
}

// The keys before RoPE read in place (ObservationRequest::cache_keys_pre_rope_on_device):
// LeverageScorePress's prompt, from the keys the decoder rotates back on its device (with its RoPE
// table and explicit fmaf), against K_pre the host rotated back (Rope::inverse).
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsTheKeysBeforeRopeInPlace) {
  SKIP_WITHOUT_GPU();
  expect_device_made_rows_keep_the_hosts("leverage", 67, 43, 11);
}

// DefensiveKV's projected value norms (out_norm_l1) read in place (ObservationRequest::
// out_norms_l1_on_device): its prompt, from the norms the decoder makes on its device from its
// values and its F16 W_o (no W_o slice comes to the host), against the norms the engine made from
// the host's rows and f32 W_o (they agree to f16 rounding of W_o).
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsTheProjectedValueNormsInPlace) {
  SKIP_WITHOUT_GPU();
  expect_device_made_rows_keep_the_hosts("defensive_kv", 71, 29, 13);
}

// Key and value norms read in place (LayerSignals::cache_rows' norms, ObservationRequest::
// row_norms_on_device): KNorm's prompt and kvpress's DecodingPress (every 4th decode step, over key
// norms) scored by the NVRTC kernels from the norms the decoder computes on its device, the host
// cache holding placeholders and no norm, keep exactly the entries of the same kernels scoring norms
// the engine computed from a host cache that took every row (one definition of a row's norm:
// row_norms.h, the same bits on either side).
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsTheRowNormsInPlace) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(in_place_config(), 59);
  std::vector<int> prompt(120), tokens(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 41 + 3) % 300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 17 + 9) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  const int heads = model->config.n_layers * model->config.n_kv_heads;
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"knorm", {}}, {"decoding", {{"compression_interval", "4"}}}}) {
    const auto on_device = jit::load_scored_policy(name, params, {}, jit::ScoringBackend::CudaKernel, device);
    const Outcome in_place = run(*model, *on_device, prompt, tokens);
    const Outcome from_host = run(*model, *on_device, prompt, tokens, /*rows_on_host=*/true);
    EXPECT_GE(in_place.report.row_norms_in_place, heads) << name;
    EXPECT_EQ(from_host.report.row_norms_in_place, 0) << name;
    EXPECT_GT(in_place.stats.counts.rows_placeholder, 0) << name;
    EXPECT_EQ(in_place.positions, from_host.positions) << name;
  }
}

// Positions read in place (LayerSignals::cached_positions, ObservationRequest::positions_on_device):
// Random (its prompt's counter-based keys), random keys every 2nd decode step (after evictions:
// every head's positions its own, with gaps, so the slots or another head's would keep other
// entries), the same every step with the cache's positions re-assigned (read in place at the
// prompt only: the keys are the original positions), StreamingLLM keeping true positions (prompt
// and decode evictions) and DecodingPress with StreamingLLM's rule (every 4th decode step) scored by
// the NVRTC kernels from the device cache's own positions keep exactly the entries the interpreter
// keeps from the host's (integer keys and positions: no rounding on either side); the selections of
// the per-head top-k read them there too; the interpreter's runs read none in place.
TEST(WindowAttentionInPlaceGpu, CudaScoringReadsThePositionsInPlace) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(in_place_config(), 61);
  std::vector<int> prompt(120), tokens(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 37 + 5) % 300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 19 + 7) % 300);
  const jit::DeviceChoice device = jit::resolve_device("cuda");
  const int heads = model->config.n_layers * model->config.n_kv_heads;
  const std::string dir = ::testing::TempDir();
  for (const bool reassign : {false, true}) {
    std::ofstream(dir + (reassign ? "/random_reassigned.yaml" : "/random_decoding.yaml"))
        << test::random_decoding_policy_text(reassign ? 1 : 2, reassign);
  }
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"random", {}},
           {dir + "/random_decoding.yaml", {}},
           {dir + "/random_reassigned.yaml", {}},
           {"streamingllm", {{"position_mode", "true_positions"}}},
           {"decoding", {{"inner", "streaming_llm"}, {"compression_interval", "4"}}}}) {
    const auto on_device = jit::load_scored_policy(name, params, {}, jit::ScoringBackend::CudaKernel, device);
    const auto interpreted = load_policy(name, params);
    const Outcome gpu = run(*model, *on_device, prompt, tokens);
    const Outcome cpu = run(*model, *interpreted, prompt, tokens);
    if (name.ends_with("random_reassigned.yaml")) {
      EXPECT_EQ(gpu.report.positions_in_place, heads) << name << ": the prompt's only";
    } else {
      EXPECT_GE(gpu.report.positions_in_place, heads) << name;
      EXPECT_GT(gpu.report.selection_positions_in_place, 0) << name;
    }
    EXPECT_EQ(cpu.report.positions_in_place, 0) << name;
    EXPECT_EQ(cpu.report.selection_positions_in_place, 0) << name;
    EXPECT_EQ(gpu.positions, cpu.positions) << name;
  }
}

}  // namespace
}  // namespace kvevict
