#pragma once
// The eviction engine: applies a PolicyProgram to a KVCache at the moments the policy declares.
// It is a ForwardObserver: attached to the decoder's first forward call (the prompt) it evicts after
// prefill (layer by layer with cascading, or once after the last layer); attached to later
// one-token calls it applies the decode-time triggers. For sweeps, a PrefillRecorder captures the
// signals of one full-cache prefill and `apply_after_prefill` replays the decision on a restored copy.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/budget.h"
#include "core/engine/eviction_plan.h"
#include "core/engine/policy_modes.h"
#include "core/engine/policy_program.h"
#include "core/engine/replay_pass.h"

namespace kvevict {

struct EngineOptions {
  Budget budget;
  uint64_t seed = 0;
  // Keep, per (layer, stored head), the scores and positions of the head's latest per-head
  // selection (HeadReport::selection_*): for agreement checks between backends (bench_gpu_agreement),
  // which classify kept-set differences as near-ties. Off by default (a copy per selection).
  bool trace_selection = false;
  // Where token selections run (core/engine/layer_selector.h). Unset: where the policy program's
  // scores are made (PolicyProgram::selection_device: cuda for the CUDA scoring backend, else host).
  // Twin runs the device algorithm on the CPU (tests).
  std::optional<SelectionDevice> selection = std::nullopt;
};

struct HeadReport {
  int budget = 0;  // tokens this (layer, KV head) was allowed
  int kept = 0;    // tokens it holds after the application
  std::vector<int32_t> kept_positions;  // original positions, ascending
  // With EngineOptions::trace_selection: the scores the head's latest selection ranked and the
  // original positions they belong to (same order). Empty without the option, and under unfolded
  // GQA, which this trace skips. selection_layer_wide: the head was ranked jointly with the
  // layer's other heads (Ada-KV's joint top-k), so its boundary is the layer's.
  std::vector<float> selection_scores;
  std::vector<int32_t> selection_positions;
  bool selection_layer_wide = false;
};

// The parts of the engine's time (EvictionReport::prefill_phases / decode_phases), so that a slow
// policy shows where its time goes. Every interval of engine time is charged to exactly one phase:
// the innermost one running (a phase entered inside another pauses it; Other is whatever no named
// phase covers).
//   Signals:   the per-head signals the programs read (window attention, computed on the host or
//              copied from the decoder's, with the download of a device buffer; current attention,
//              norms, ...) and the bookkeeping of what the decoder hands over each layer (recorded
//              queries, accumulated attention, query and model signals, merge-state attention).
//   Scoring:   the policy program's calls: score, stage_score, head_plan, layer_weight, and the
//              key-channel stage (its channel_score and the zeroing it decides).
//   Selection: budgets (the layer split, head budgets, decode budgets and the over-budget check) and
//              the token selections (LayerSelector, chunk, share and model-wide rules).
//   CacheEdit: the cache's keeps, unfolding, codebook stage and re-assigned positions, merges on
//              evict, and the per-entry state kept aligned with the cache. A listener of the cache
//              runs inside it: the CUDA decoder's device mirror records keeps here (its compaction on
//              the device happens at the decoder's next flush, outside the engine).
//   Other:     the rest: the prompt's plan, the report (kept positions sorted after every call).
enum class EnginePhase : uint8_t { Signals, Scoring, Selection, CacheEdit, Other };
template <> struct ModeNames<EnginePhase> {
  static constexpr std::array<std::string_view, 5> names = {"signals", "scoring", "selection", "cache_edit", "other"};
};
static_assert(ModeNames<EnginePhase>::names.size() == static_cast<size_t>(EnginePhase::Other) + 1);
inline constexpr size_t kNumEnginePhases = ModeNames<EnginePhase>::names.size();

// Seconds per EnginePhase (indexed by it; names: mode_name(phase)).
struct EnginePhaseSeconds {
  std::array<double, kNumEnginePhases> seconds{};
  double& operator[](EnginePhase p) { return seconds[static_cast<size_t>(p)]; }
  double operator[](EnginePhase p) const { return seconds[static_cast<size_t>(p)]; }
  double total() const {
    double sum = 0;
    for (double s : seconds) sum += s;
    return sum;
  }
};

struct EvictionReport {
  std::string policy;
  std::string budget;
  int prompt_len = 0;
  // [layer][stored head]: KV heads, or query heads when the policy unfolds GQA (gqa_unfolded).
  std::vector<std::vector<HeadReport>> layers;
  int stored_heads = 0;       // heads per layer as stored (n_kv_heads, or n_heads when unfolded)
  bool gqa_unfolded = false;  // the cache holds one stored head per query head (unfold_gqa)
  size_t bytes_full = 0;  // cache bytes before the first application (the folded, per-KV-head cache)
  size_t bytes_kept = 0;  // cache bytes after the latest application
  size_t peak_bytes = 0;  // largest cache size seen during prefill
  double seconds = 0;     // time spent inside the engine
  // `seconds` split by phase (EnginePhase): prefill_phases for the prompt's forward calls,
  // apply_after_prefill and finish_replay; decode_phases for the forward calls after the prompt
  // (all zero before the first). Together they cover `seconds` less a few clock reads per call.
  EnginePhaseSeconds prefill_phases, decode_phases;
  // Where the token selections ran, and how many layer selections (one call per layer and
  // application, all heads at once; chunk, share, model-wide and staged-share rules run on the host
  // and are not counted).
  SelectionDevice selection = SelectionDevice::Host;
  int64_t layer_selections = 0;
  // The window attention the decoder computed (LayerSignals::window_attention) used instead of the
  // host's compute_window_attention: (layer, stored head) signals copied out of it, and device
  // buffers downloaded for that (one per layer at most). 0 when the decoder computed none.
  int64_t window_attention_reused = 0;
  int64_t window_attention_downloads = 0;
  // (layer, stored head) signals handed to a device scoring program in place (no download, no
  // upload; PrecomputedWindow::in_place), counted apart from window_attention_reused.
  int64_t window_attention_in_place = 0;
  // Decode steps' A_now (the decoder's one-token column sums, LayerSignals::column_sums_on_device):
  // (layer, stored head) signals handed to a device scoring program in place, and device column
  // sums downloaded for heads that could not be (one per layer at most).
  int64_t current_attention_in_place = 0;
  int64_t current_attention_downloads = 0;
  // (layer, stored head) scorings that read K, V or K_pre where the decoder copied them out on its device
  // (LayerSignals::cache_rows, ObservationRequest::cache_keys_on_device): no row came to the host.
  int64_t cache_rows_in_place = 0;
  // (layer, head) scorings that read key_norm or value_norm (each counted once per signal) where the
  // decoder handed them over on its device (LayerSignals::cache_rows' norms): no norm came to the host.
  int64_t row_norms_in_place = 0;
  // (layer, stored head) scorings handed the positions where the decoder's device cache holds them
  // (LayerSignals::cached_positions): none uploaded for them.
  int64_t positions_in_place = 0;
  // Layer selections from the selector's buffer that read the positions there too (the decoder's
  // device cache's; LayerSelector::select_heads_from_buffer's `held`): none uploaded for them.
  int64_t selection_positions_in_place = 0;
  // A_acc held on the scoring device (accumulated_attention_store.h): (layer, stored head) signals
  // handed to the program in place, and blocks whose device column sums were added there (none
  // downloaded); 0 when the engine accumulates on the host.
  int64_t accumulated_attention_in_place = 0;
  int64_t accumulated_attention_device_adds = 0;
  // (layer, stored head) decode scorings written into the selector's device buffer and selected
  // from there (PolicyProgram::score_on_device, LayerSelector::layer_score_buffer): no download of
  // the scores, no upload for the selection.
  int64_t scores_in_place = 0;
  // The same for a prompt's scores (prefill_scores_in_selector): (layer, stored head) scorings written
  // into the selector's per-layer buffers, which every selection of the layer read in place.
  int64_t prefill_scores_in_place = 0;
  // score_at insertion: (layer, stored head) decode scorings given the new entries alone (a decode
  // indicator that scores each entry alone, dsl/entry_locality.h), not the whole head.
  int64_t new_entries_scored_alone = 0;
  // The most floats of hidden states (hidden[c, t]) the engine's records held at once: n_embd x
  // tokens x layers, or one call's block of one layer when every read of them is in their call
  // (model_signals.h); 0 when the policy reads none.
  int64_t hidden_state_floats_peak = 0;
  // (layer, stored head) scorings handed hidden[c, t] where the decoder made it on its device
  // (LayerSignals::hidden_states_on_device): no attention input came to the host or went back up.
  int64_t hidden_states_in_place = 0;
  // (layer, stored head) keeps that kept every entry in place (a threshold rule whose candidates
  // all passed, a selection within budget): no cache edit, no compaction call to a device mirror.
  int64_t unchanged_keeps = 0;
  // (layer, stored head) decode steps of a threshold rule over frozen scores decided from the
  // entries that left the recent window alone (threshold_steps.h), not from the whole head.
  int64_t threshold_window_steps = 0;
  // Prompt layers whose heads read one gather of hidden[c, t] (every head held the same positions)
  // instead of one copy each.
  int64_t hidden_state_layer_gathers = 0;
  // Added: what happened, for reports and tests.
  int applications = 0;       // prefill applications (one per cascading stage) + decode evictions
  bool prefill_evicted = false;  // false when skipped (prompt within budget) or the policy has no prefill run
  int decode_steps = 0;       // forward calls after the prompt
  // SpindleKV codebook stage (0 when the policy has no merge stage). Every head becomes
  // codebook-backed (KVCache::set_codebook); both byte counts are the cache's bytes_in_use() just
  // before and just after the stage: codes + one int32 index + one float norm per (token, K or V) +
  // int32 positions. Measured compression ratio = bytes_codebook / bytes_before_codebook.
  size_t bytes_before_codebook = 0;
  size_t bytes_codebook = 0;
  int64_t key_codes = 0, value_codes = 0, codebook_tokens = 0;
  // Similarity graphs built where the selection runs (LayerSelector::similarity_graph: the twin, a
  // CUDA device), not by the host's own builder; 0 with the host selector.
  int64_t codebook_graphs_by_selector = 0;
  double codebook_seconds = 0;
  // KVzip's context replay (observe.replay): the replay pass's wall time, outside `seconds` (it is a
  // decoder forward; 0 when no replay ran: a prompt within the budget is not replayed).
  double replay_seconds = 0;
  // Key-channel pruning (channel_selection.h): zeroed key channels summed over (layer, KV head).
  // Zeroed channels stay stored: bytes_kept does not change with them.
  int64_t pruned_key_channels = 0;
};

// Records what the policies of a sweep need from one full-cache prefill.
class PrefillRecorder : public ForwardObserver {
 public:
  PrefillRecorder(int window, bool accumulated_attention);
  ObservationRequest request() const override;
  void after_layer(const LayerSignals& signals, KVCache& cache) override;
  // What a recorder keeps besides attention: the layer inputs' norms (hidden_norm), the
  // output-projection Grams (out_norm), W_o itself per query head (out_norm_l1; dim * n_heads *
  // head_dim floats per layer) and the attention inputs (hidden; n_tokens * dim floats per layer).
  struct ModelSignals {
    bool hidden_norms = false, output_grams = false, output_projection = false, hidden_states = false;
  };
  void request_model_signals(const ModelSignals& wanted);
  // The prompt query statistics (query_statistics_block.h) of each of `wanted` (distinct: one per
  // query_stats_from of the sweep's policies that read Q_mean / Q_cov, query_statistics_serve),
  // kept instead of every query. A single request is asked of the decoder, which makes them where
  // its queries live (on its device for the CUDA decoder); several are made by the host rule
  // (block_query_statistics, rotated back with `config`'s RoPE) from every query of the prompt,
  // which the decoder then hands over for the call (only the constructor's window of it kept).
  void request_query_statistics(std::vector<QueryStatisticsRequest> wanted, const ModelConfig& config,
                                int prompt_len);
  const std::vector<QueryStatisticsRequest>& statistics_requests() const { return statistics_requests_; }
  // The segment-local attention A_seg for each of `wanted` (distinct; segment_attention_request_for
  // the sweep's policies that read it): a single request is asked of the decoder (ObservationRequest::
  // segment_attention: on its device for the CUDA decoder); several are made by the host rule
  // (block_segment_attention) from every query of the prompt, which the decoder then hands over for
  // the call, and the host's rows. Only the constructor's window of queries is kept: n_heads x
  // prompt floats per layer and request instead of every query of every layer.
  void request_segment_attention(std::vector<SegmentAttentionRequest> wanted, int prompt_len);
  const std::vector<SegmentAttentionRequest>& segment_requests() const { return segment_requests_; }
  // The policies of the sweep whose window is found from the prompt's tokens (FinchPress's
  // delimiter; they must outlive the recorder): every query of the prompt is handed over for the
  // call, and the rows kept are the largest of their windows for its tokens (recorded_window_for),
  // found at the first layer, and the constructor's window.
  void keep_windows_found_from_tokens(std::vector<const PolicyProgram*> policies, int prompt_len);

  struct Layer {
    int window = 0;
    std::vector<float> window_queries;                      // [window][n_heads][head_dim]
    std::vector<std::vector<float>> accumulated_attention;  // [n_heads][len]
    std::vector<float> hidden_norms;                        // [n_tokens] when requested
    std::vector<float> output_grams;                        // [n_heads][head_dim][head_dim] when requested
    std::vector<float> output_projection;                   // [n_heads][dim][head_dim] when requested
    std::vector<float> hidden_states;                       // [n_tokens][dim] when requested
    std::vector<BlockQueryStatistics> query_statistics;     // [statistics_requests()], when requested
    std::vector<BlockSegmentAttention> segment_attention;   // [segment_requests()], when requested
  };
  // Layer `layer`'s A_seg for `request`, null when it was not recorded.
  const BlockSegmentAttention* segment_attention(int layer, const SegmentAttentionRequest& request) const;
  // Layer `layer`'s query statistics that serve a policy described by `d` (query_statistics_serve),
  // null when none was recorded.
  const BlockQueryStatistics* query_statistics(int layer, const PolicyDescription& d) const;
  // KVzip's replay scores (A_replay), computed once per recorded prefill for each observe.replay
  // setting the sweep's policies use: runs the replay pass on `decoder`, which must still hold
  // exactly the recorded prompt (right after the recording forward; the cache ends as it was).
  void record_replay(Decoder& decoder, const PolicyObserve::Replay& settings);
  const ReplayScores* replay(const ReplayOptions& options) const;  // null when not recorded

  const std::vector<Layer>& layers() const { return layers_; }
  const std::vector<int>& tokens() const { return tokens_; }  // the prompt's tokens (always recorded)
  int first_position() const { return first_position_; }
  int n_tokens() const { return n_tokens_; }

 private:
  // request_: every query of the prompt when several statistics or A_seg, or a token window, need
  // it; a single statistics or A_seg request asked of the decoder.
  void ask_the_decoder();

  ObservationRequest request_;
  int window_ = 0;       // the constructor's window
  int kept_window_ = 0;  // query rows kept per layer (request_.window may ask for more, for A_seg)
  std::vector<QueryStatisticsRequest> statistics_requests_;
  Rope rope_;  // the model's, for statistics made by the host rule
  std::vector<SegmentAttentionRequest> segment_requests_;
  std::vector<const PolicyProgram*> token_windows_;  // keep_windows_found_from_tokens
  int prompt_len_ = 0;   // what the request_* / keep_windows_found_from_tokens calls were told
  std::vector<Layer> layers_;
  std::vector<int> tokens_;
  std::vector<std::pair<ReplayOptions, ReplayScores>> replays_;  // one per observe.replay setting
  int first_position_ = 0;
  int n_tokens_ = 0;
};

// Whether prompt query statistics recorded as `recorded` asks serve a policy described by `d`: it
// reads Q_mean or Q_cov from the same position, and the covariance was kept if it reads Q_cov.
bool query_statistics_serve(const QueryStatisticsRequest& recorded, const PolicyDescription& d);
// Whether one of `recorded` serves it.
bool query_statistics_serve(std::span<const QueryStatisticsRequest> recorded, const PolicyDescription& d);

// The segment-local attention `policy` reads at a prompt of `prompt_len` tokens (ObservationRequest::
// segment_attention's settings: observe.segment, its window for that prompt, causal, scaled); not
// enabled for a policy without observe.segment.
SegmentAttentionRequest segment_attention_request_for(const PolicyProgram& policy, int prompt_len);

// The query rows a PrefillRecorder must hold for `policy` to be applied after a prefill of
// `prompt_len` tokens (every row when it reads segments the recorder's `segments` do not serve,
// query statistics that none of the recorder's `statistics` serves, or a window found from the
// prompt's tokens when `tokens` is empty; with the tokens, that window, or 0 for a prompt the
// policy refuses). A recorder for a policy that reads hidden_norm / out_norm also needs
// request_model_signals.
int recorded_window_for(const PolicyProgram& policy, int prompt_len,
                        std::span<const QueryStatisticsRequest> statistics = {},
                        std::span<const SegmentAttentionRequest> segments = {}, std::span<const int> tokens = {});

class EvictionEngine : public ForwardObserver {
 public:
  EvictionEngine(const PolicyProgram& policy, const ModelConfig& config, EngineOptions options);
  ~EvictionEngine() override;

  ObservationRequest request() const override;
  void after_layer(const LayerSignals& signals, KVCache& cache) override;
  void after_forward(int n_tokens, KVCache& cache) override;

  // Announces the prompt the next forward call starts (at position 0; prefill_prompt calls it):
  // the engine makes its plan now, so request() can already ask the decoder for the window
  // attention of a window found from the prompt's length or tokens (NACL, FINCH) and for only the
  // query rows it needs, and a prompt that follows decode steps is known as one. The next call
  // must start the prompt and bring these tokens (std::logic_error otherwise). UsageError when the
  // policy refuses this prompt (the plan's checks), before any forward call.
  void announce_prompt(std::span<const int> tokens);
  // Forgets an announcement whose prompt did not start (prefill_prompt, when the decoder threw).
  void withdraw_announcement();
  // Forgets a prefill in blocks that did not reach its last block (prefill_prompt, when the decoder
  // threw between blocks), so that the next prompt is not taken for its continuation. A no-op once
  // the prompt is complete.
  void abandon_block_prefill();
  // Announces a prefill in blocks (core/engine/block_prefill.h): the next forward calls, from
  // position 0 up to `prompt_len` tokens, are one prompt; the policy is applied after each of them.
  void begin_block_prefill(int prompt_len);
  // The policy's run.prefill_block (0: the prompt in one forward call).
  int prefill_block() const;

  // One-shot prefill eviction from recorded signals (the recorder's window must be >= the policy's;
  // a policy that reads A_replay needs the recorder's record_replay for its observe.replay).
  void apply_after_prefill(const PrefillRecorder& recorded, KVCache& cache);

  // KVzip (a policy that reads A_replay, docs/DSL.md §5): the prompt's forward call records its
  // signals but scores and evicts nothing, since the scores need a second pass over the full cache.
  // Then finish_replay runs the replay on `decoder` (skipped when the prompt is within the budget),
  // scores every layer, evicts and ends the prefill. prefill_prompt calls it; `logits` (the
  // prompt's, from the decoder's buffer, which the replay overwrites) are copied and returned.
  // Any other forward call while the prefill waits is a UsageError.
  bool awaits_replay() const;
  const std::vector<float>& finish_replay(Decoder& decoder, std::span<const int> prompt, const std::vector<float>& logits);

  const EvictionReport& report() const;
  // Whether the engine acts on decode calls (the policy evicts while decoding: run.decode_every > 0).
  // When false, callers decode without it as observer, which lets a device-resident decoder keep
  // the host cache out of the decode loop (docs/CUDA.md, "Deferred host appends").
  bool observes_decode() const;
  // What is fixed for the current prompt (eviction_plan.h): equal to make_eviction_plan for this
  // policy, model, budget and prompt once the prompt's first layer arrived; plan_before_prompt's before.
  const EvictionPlan& plan() const;

  // Lengths of the per-entry state the engine holds for stored head (layer, stored_head): its
  // prefill scores (only during prefill; on the host, or held in the selector's buffer:
  // prefill_scores_in_place) and the accumulated-attention rows of the head's query
  // heads. After every forward call each equals the head's cache length (the engine indexes them
  // with cache indices); empty vectors are not listed. For tests of that invariant.
  std::vector<size_t> aligned_state_lengths(int layer, int stored_head) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvevict
