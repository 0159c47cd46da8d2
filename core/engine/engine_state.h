#pragma once
// The eviction engine's state (EvictionEngine::State, the private half of engine.h), shared by the
// files that implement it, one concern each:
//   engine.cpp            the public calls (after_layer, after_forward, apply_after_prefill, ...),
//                         the state's construction and reset;
//   engine_records.cpp    what is recorded of the decoder's hand-over for the signals (queries,
//                         model signals, accumulated attention; a prompt layer's hidden states);
//   engine_signals.cpp    the signals a head's scoring reads (gather_signals);
//   engine_row_reads.cpp  what the engine asks of the decoder for its next call (request()): the
//                         query window, the window attention, the cached rows each call reads;
//   engine_selection.cpp  a layer's budgets and selections, and the cache edits that apply them;
//   engine_prefill.cpp    the prompt: its scores, cascading, the end of the prefill (replay,
//                         channels, codebook, report);
//   engine_decode.cpp     decode steps: the trigger, the budget, the eviction.
// Not a public header: only core/engine/engine*.cpp include it.
#include "core/engine/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/decode/kept_list.h"
#include "core/decode/row_norms.h"
#include "core/engine/accumulated_attention_store.h"
#include "core/engine/attention_signals.h"
#include "core/engine/budget_allocator.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/channel_selection.h"
#include "core/engine/chunk_selection.h"
#include "core/engine/codebook_stage.h"
#include "core/engine/decoder_device_copies.h"
#include "core/engine/device_reads.h"
#include "core/engine/engine_phase_clock.h"
#include "core/engine/eviction_plan.h"
#include "core/engine/merge_on_evict.h"
#include "core/engine/merge_state.h"
#include "core/engine/model_signals.h"
#include "core/engine/query_signals.h"
#include "core/engine/head_budgets.h"
#include "core/engine/layer_selector.h"
#include "core/engine/layer_shared_mean.h"
#include "core/engine/mass_budget.h"
#include "core/engine/model_selection.h"
#include "core/engine/original_positions.h"
#include "core/engine/precomputed_window.h"
#include "core/engine/query_checks.h"
#include "core/engine/recent_queries.h"
#include "core/engine/replay_checks.h"
#include "core/engine/replay_prompt.h"
#include "core/engine/segment_observation.h"
#include "core/engine/selection.h"
#include "core/engine/staged_selection.h"
#include "core/engine/threshold_selection.h"
#include "core/engine/threshold_steps.h"
#include "core/engine/window_observation.h"
#include "core/util/error.h"

namespace kvevict {
namespace engine_detail {

// Buffers behind one ScoreInputs, one per tensor signal (core/engine/signals.h).
struct HeadSignals {
  std::array<std::vector<float>, kNumTensorSignals> buffer;
  std::vector<float> key_scratch, value_scratch;  // a codebook head's keys/values, reconstructed
  ScoreInputs in;
};

}  // namespace engine_detail

struct EvictionEngine::State {
  using HeadSignals = engine_detail::HeadSignals;

  const PolicyProgram& policy;
  const PolicyDescription& desc;
  ModelConfig config;
  EngineOptions options;
  // What is fixed for the current prompt (eviction_plan.h): window, protected sets, budgets when
  // static, skip verdict, selection spec, triggers. Built once per prompt (before the first one:
  // plan_before_prompt); everything below it is the run's mutable state.
  EvictionPlan plan;
  // Abbreviations of plan.geometry (fixed for the engine's life): the model's layers, KV heads,
  // query heads, group size and head dimension; the heads the policy selects for: KV heads (Gs = G
  // query heads each), or query heads when it unfolds GQA (Hs = Hq, Gs = 1; the cache is unfolded at
  // the end of prefill).
  const int L, Hkv, Hq, G, d;
  const bool unfold;
  const int Hs, Gs;

  EvictionReport report;
  bool in_prefill = false, prefill_done = false;
  int decode_step = 0;
  int appended = 0;      // tokens appended after the prompt (a decode forward may carry several: a question block)
  int block_prompt = 0;  // the prompt's length during a prefill in blocks (begin_block_prefill), else 0
  // The next prompt's plan, made when the caller announced the prompt before its first call
  // (EvictionEngine::announce_prompt, which prefill_prompt calls): its window is then known before
  // that call even when found from the prompt's length or tokens (NACL's proxy share, FINCH's
  // delimiter), so a decoder can be asked for its attention. Becomes `plan` when the prompt starts.
  std::optional<EvictionPlan> announced;
  std::vector<int> announced_tokens;  // its tokens, which the call that starts it must bring
  // The running prompt's plan came from an announcement: its window was known before every call.
  bool plan_announced = false;
  int prefill_seen = 0;  // prompt tokens in the cache so far (the end of the latest block)
  std::vector<int> layer_budget;     // per-head budget of each layer in force (the plan's when static)
  std::vector<double> layer_weight;  // P_l when the policy has one
  // Head-level budgets (head_budgets.h), when the policy has head_mode / head_weight programs:
  // [layer][stored head] plans from prefill, and the budgets of the layer's last eviction.
  std::vector<std::vector<HeadPlan>> head_plans;
  std::vector<std::vector<int>> head_budget;
  // [layer][stored head][cache entry] prefill scores, released at the end of prefill (decode
  // triggers score afresh), except frozen ones (score_at insertion: kept aligned with the cache,
  // each decode step's new entries' scores appended: score_new_entries).
  std::vector<std::vector<std::vector<float>>> scores;
  std::vector<std::vector<std::vector<float>>> accumulated;  // [layer][query head][cache entry]
  // ... or held on the scoring device instead (accumulated_in_place; accumulated_attention_store.h).
  std::unique_ptr<AccumulatedAttentionStore> accumulated_device;
  RecentQueries recent;           // the newest query rows of each layer
  SegmentQueries segments;        // observe.segment's observation queries (when the decoder hands no A_seg)
  // The decoder's A_seg of the layer being scored at the prompt (LayerSignals::segment_attention),
  // held during one after_layer; null when it handed none (then `segments` has the queries).
  const BlockSegmentAttention* segment_given = nullptr;
  int segment_given_layer = -1;
  uint64_t sampling_seed = 0;     // seed of the random share for the current application (sampling_seed_for_step)
  OriginalPositions original;     // active once the policy re-assigned the cache's positions
  MergeOnEvictState merge_state;  // what merge.method cam carries between evictions (merge_state.h)
  // The decoder's window attention of the current layer, when it offered the engine's own
  // (precomputed_window.h); held during one after_layer.
  PrecomputedWindow window_in;
  // Where token selections run (layer_selector.h): EngineOptions::selection, else the program's.
  std::unique_ptr<LayerSelector> selector;
  // The current prompt stage's evictions are followed by another that selects the same layers again
  // (cascading, before the last layer): the prompt's scores held in the selector must follow them.
  bool held_scores_selected_again = false;
  // What the program reads in place on its device and where its scores go (device_reads.h):
  // decided once, from the program, the selector's device and the plan.
  const DeviceReads device_reads;
  // The decoder's device copies of the current after_layer call's cached rows (and norms) and
  // positions, when the modes above read them there (decoder_device_copies.h).
  DecoderDeviceCopies decoder_copies;
  // What a one-token decode step and the prompt read of the cached rows (cache_row_reads.h):
  // fixed by the policy, the prompt's as if announced; request() narrows the prompt's per call
  // (engine_row_reads.cpp).
  const CacheRowReads decode_row_reads, prompt_row_reads;
  // The host cache's rows of the current after_layer call are placeholders (LayerSignals::
  // cache_rows_are_placeholders), and some layer's were during this prompt (for finish_prefill, in
  // after_forward): every read of a cached key or value is then refused (refuse_placeholder_read).
  bool placeholder_rows = false, prompt_had_placeholders = false;
  // Where the current after_layer call's merges run when its host rows are placeholders: the
  // decoder's device cache (LayerSignals::cached_row_merges); null otherwise.
  CachedRowMerges* decoder_merges = nullptr;
  // During decode_layer of a call whose host rows are placeholders: the decoder's column sums of
  // the one-token block, A_now's source (copy_decoder_current_attention). Null otherwise.
  const std::vector<std::vector<float>>* decoder_current_attention = nullptr;
  // ... or their device copy only (ObservationRequest::column_sums_on_device_only), and its download.
  ColumnSumsSignal decoder_current_device;
  std::vector<float> current_host;
  // Query and model signals (query_signals.h, model_signals.h): the model's RoPE (Q_pre, the
  // statistics' rotation), the prompt query statistics, token / hidden-norm records by position,
  // and the current layer's output-projection Grams (out_norm; the decoder's, valid during after_layer).
  Rope rope;
  QueryStatistics query_stats;
  PositionRecords records;
  std::span<const float> output_grams;
  std::span<const float> output_projection;  // W_o per query head (out_norm_l1), valid during after_layer
  // hidden[c, t] of the prompt's layer being scored, gathered once ([c][T]) when every head holds the
  // same positions (share_layer_hidden_states), which each head's gather hands on instead of its own
  // copy; layer -1 otherwise (and after the layer's gathers).
  struct LayerHiddenStates {
    int layer = -1, T = 0;
    std::vector<float> data;
  } layer_hidden;
  // KVzip (A_replay; replay_checks.h): the prompt's forward records but scores nothing; the
  // scores wait for the replay (finish_replay / apply_after_prefill). Meanwhile each layer's output
  // projection is held here, since the decoder's spans end with its after_layer.
  bool replay_pending = false;
  const ReplayScores* replay = nullptr;  // what A_replay reads while the waiting prefill completes
  std::vector<std::vector<float>> held_grams, held_projection;
  std::vector<float> replay_logits;  // the prompt's logits, copied before the replay's forwards

  // Phase accounting (engine_phase_clock.h): the slots of the current engine call and the
  // innermost phase running.
  EnginePhaseClock clock;

  // Original positions of a head's entries (the cache's own unless they were re-assigned).
  const int32_t* positions(const KVCache& cache, int layer, int kv_head) const {
    return original.active() ? original.of(layer, kv_head) : cache.positions(layer, kv_head);
  }

  State(const PolicyProgram& p, const ModelConfig& c, EngineOptions o);

  // Whether a head's inputs read cached rows (K, V or K_pre) in place on the decoder's device
  // (EvictionReport::cache_rows_in_place counts such scorings).
  static bool reads_rows_in_place(const ScoreInputs& in) {
    return in.on_device(TensorSignal::Keys) || in.on_device(TensorSignal::Values) ||
           in.on_device(TensorSignal::KeysPreRope) || in.on_device(TensorSignal::OutputNormL1);
  }
  // The cache head holding stored head s's entries: its KV head while an unfolding policy's cache
  // is still folded (during prefill), s itself otherwise.
  int cache_head(int s, const KVCache& cache) const { return unfold && !cache.unfolded() ? s / G : s; }

  int query_window() const { return plan.query_window; }
  // The plan of the next call's prompt as far as it is known before that call: the announced one,
  // else the current plan (whose window is the policy's own when it is known before the prompt).
  const EvictionPlan& next_prompt_plan() const { return announced ? *announced : plan; }
  // Whether the window of a prompt call is known before the call: announced, fixed by the policy,
  // or resolved when a prefill in blocks started whose next block is still to come (the prompt's
  // length; not a window found from the tokens of the first block alone unless announced).
  bool prompt_window_known() const;
  // A prefill in blocks has blocks still to come: the next call continues it.
  bool blocks_pending() const { return in_prefill && block_prompt > 0 && prefill_seen < block_prompt; }
  // Where the prompt of the next prompt call ends, when known before the call: the announced
  // prompt's length, or that of the prefill in blocks under way (begin_block_prefill); 0 otherwise.
  int prompt_end_before_call() const { return announced ? announced->prompt_len : block_prompt; }

  void reset();

  // What the query and model signals need from a block (query_signals.h, model_signals.h).
  void record_query_and_model_signals(const LayerSignals& s);

  // Q_mean ([Gs][d]) or Q_cov ([Gs][d][d]) of one head, rotated as observe.query_rotation says.
  void query_statistic(TensorSignal id, int layer, int kv_head, std::vector<float>& out) const;

  // Appends the block's window queries to the rolling buffer of the layer (keeps the newest rows).
  void record_queries(const LayerSignals& s);

  // The query rows a layer's window attention is computed from now: the newest min(window, rows)
  // recorded queries ([W][Hq][d] at `rows`), the first at position `first`; W = 0 when none.
  struct WindowRows {
    const float* rows = nullptr;
    int W = 0, first = 0;
  };
  WindowRows window_rows(int layer) const;

  // Whether the policy's window attention is one a decoder may compute for it
  // (ObservationRequest::window_attention): scaled, the G query heads of each KV head, causal or
  // not (window_attention_causal: NACL's official proxy is not); not NACL's same_index_head map;
  // and read (window_attention_read).
  bool decoder_window_attention() const;
  // Whether anything reads the window attention A over the whole cache: always, except for a
  // policy with a segment-local observation (observe.segment) whose programs read neither A nor
  // O, whose window is its segments' (A_seg) alone.
  bool window_attention_read() const;

  // ObservationRequest::window_attention: the policy's window when a decoder may compute its A,
  // while a prompt is pending if its window is known before the call (prompt_window_known: an
  // announced prompt, also one that follows decode steps), and while decoding if the decode trigger
  // reads A (the window is the prompt's then); 0 otherwise.
  int requested_window_attention() const;

  // Holds the decoder's window attention of the block's layer when it is the engine's own (after
  // record_queries: the window rows are the layer's newest). Not over re-assigned positions: the
  // engine's causal mask reads the original ones.
  void offer_window_attention(const LayerSignals& s, const KVCache& cache);

  // A_now of KV head kv_head's query heads from the decoder's one-token column sums ([Gs][T]): the
  // host cache holds placeholder rows, so it is not computed from the cached keys. The host copy
  // when the decoder made one, else its device copy, downloaded once per layer (the decoder's
  // thread: decode steps score their heads one after another).
  void copy_decoder_current_attention(int kv_head, int T, float* out);

  // Entries of each stored head of `layer` in the cache now.
  std::vector<int64_t> stored_lengths(const KVCache& cache, int layer) const;

  // Adds the block's attention column sums to the stored accumulated attention of the layer: on the
  // device, from the decoder's device sums where it left them there, else from its host ones.
  void record_accumulated(const LayerSignals& s, const KVCache& cache);

  // Gathers layer_hidden (empty before) for the prompt's `layer` when the policy's prompt programs
  // read hidden and every head holds the same positions (a prompt's layer before its eviction).
  void share_layer_hidden_states(int layer, const KVCache& cache);

  // The signals of one head, timed as Signals: for the calling thread (score_layer_at_prefill's
  // parallel loop calls gather_signals and times the loop).
  // `only`, when given: gather these signals alone (a later stage's program, over a head the earlier
  // stages cut).
  // `first_slot`: as gather_signals'.
  HeadSignals signals_for(int layer, int kv_head, const KVCache& cache, bool decoding, const SignalSet* only = nullptr,
                          int first_slot = 0);

  // Refuses a read of `what` (cached keys or values) of layer `layer` in a call whose host rows are
  // placeholders: the policy declared it reads no cached row (cache_row_reads.h), so the read is a
  // bug of that declaration, which must fail loudly rather than score placeholder zeros.
  void refuse_placeholder_read(int layer, const std::string& what) const;

  // The signals the programs of this phase read (the decode indicator's while decoding, the
  // prompt-time programs' otherwise). With placeholder rows only those are made: another signal
  // of the policy (CAKE's A_now at the prompt) would read rows for nobody.
  const SignalSet& phase_reads(bool decoding) const;
  bool makes_signal(TensorSignal id, bool decoding, const SignalSet* only) const {
    return desc.needs(id) && (!only || (*only)[signal_index(id)]) &&
           (!placeholder_rows || phase_reads(decoding)[signal_index(id)]);
  }

  // `window_out`, when given, receives the window attention ([G][W][T], T = the head's length)
  // instead of the head's own vector. Untimed: safe on worker threads. The head's keys and values
  // are read only by the signals that need them (refuse_placeholder_read).
  // `first_slot` > 0: the head's entries from that cache slot on alone (score_new_entries; only
  // signals made per entry, signals.h's source_made_per_entry, and no window attention).
  HeadSignals gather_signals(int layer, int kv_head, const KVCache& cache, bool decoding, float* window_out = nullptr,
                             const SignalSet* only = nullptr, int first_slot = 0);
  // The head's cached keys and values, read on first use (engine_signals.cpp).
  struct HeadRows;
  // gather_signals' window attention A: the decoder's in place on its device, or copied out of it,
  // or computed here; into window_out when given, else the head's own buffer. Nothing without a
  // window, or while decoding when the decode step reads no A.
  void gather_window_attention(HeadRows& cached, bool decoding, float* window_out, HeadSignals& hs,
                               const SignalSet* only);
  // gather_signals' tensor signal `id` (not A, not the positions) into `out`; false when it is not
  // there to set (handed over in place on a device, or no window rows to make it from).
  bool gather_tensor_signal(TensorSignal id, HeadRows& cached, HeadSignals& hs, std::vector<float>& out);
  // Its column-sum attentions: A_now (the decoder's in place or copied out of its sums, else computed
  // from the newest window query) and A_acc (in place on the scoring device, else the host's sums).
  bool gather_column_attention(TensorSignal id, HeadRows& cached, HeadSignals& hs, std::vector<float>& out);
  // Its cached-row signals: K, V, K_pre and the rows' norms, in place on the decoder's device when it
  // handed them over for this head, else from the host's rows (or the host's held norms).
  bool gather_cached_row_signal(TensorSignal id, HeadRows& cached, HeadSignals& hs, std::vector<float>& out);

  // Q, Q_pre or O of one head from the newest min(window, rows) window queries (query_signals.h);
  // false when there are no window rows (the signal then stays null, as A does). Only O reads the
  // head's cached rows (its values, and its keys when the head has no A).
  bool window_rows_signal(TensorSignal id, int layer, int kv_head, HeadRows& cached, ScoreInputs& in,
                          std::vector<float>& out) const;
  // A_seg of one head ([Gs][T], entries at original `positions`): the decoder's when it handed it
  // for this layer, else from the recorded queries over the head's cached keys; std::logic_error
  // when neither is there.
  void segment_attention(int layer, int kv_head, HeadRows& cached, const int32_t* positions, int T, float* out) const;

  std::vector<float> score(const HeadSignals& hs, bool decoding);

  // The length of every KV head of `layer`, which a layer-shared selection needs equal (std::logic_error).
  int layer_shared_length(const KVCache& cache, int layer) const;

  // Whether a decode eviction's scores go straight into the selector's buffer: the program writes
  // them there and nothing on the host reads them (a per-head top-k, Ada-KV's layer-wide ranking or
  // TOVA's layer-shared one: no staged, chunked or threshold rule, no merge that reads the scores
  // (merge_reads_selection_scores: CaM), no trace).
  bool decode_scores_in_selector() const;
  // ... and a prompt's: the same rules, in a prompt that evicts (not skipped), layer by layer (no
  // model-wide pool, no unfolded GQA), with no host reader of the prompt's scores (frozen scores kept
  // for decoding, the mass allocation). They then wait in the selector's per-layer buffers for the
  // layer's selections (one, or one per later layer when cascading) and are given back after the
  // layer's last one (keep_layer).
  bool prefill_scores_in_selector() const;

  // A decode eviction of `layer` whose scores never come to the host: each head's decode indicator
  // written into the layer's selector buffer by the program (on its device), then the selection
  // from there (select_from_selector).
  void evict_layer_scored_in_selector(KVCache& cache, int layer, int budget, const ProtectedSet& pr, int step);

  // Layer `layer`'s selector buffer laid for heads of `lengths` entries (timed as Selection).
  float* selector_buffer(int layer, const std::vector<int64_t>& lengths);

  // Head h's scores written by the program into its place in layer `layer`'s selector buffer.
  void score_into_selector(int layer, const HeadSignals& hs, const std::vector<int64_t>& lengths, int h, float* buffer,
                           bool decoding);

  // The selection of `layer` from the scores in its selector buffer: every head's (a per-head top-k),
  // Ada-KV's joint ranking of the layer's heads, or TOVA's one selection on their mean (evict_layer's
  // branches, whose scores are host spans).
  void select_from_selector(KVCache& cache, int layer, int budget, const ProtectedSet& pr);

  // A prompt layer's scores written into its selector buffer (prefill_scores_in_selector), where
  // they wait for the layer's selections; none are held on the host.
  void score_layer_into_selector(int layer, const std::vector<HeadSignals>& heads, const KVCache& cache);

  // Prefill: scores of every head of the layer and the layer weight.
  void score_layer_at_prefill(int layer, const KVCache& cache);

  // Budgets of layers 0..last: `stage_total` split by weight, floors = protected, caps = what each holds.
  std::vector<int64_t> split(int last, int64_t stage_total, const KVCache& cache) const;

  // Budgets of layers 0..last: the weighted split of `stage_total`, or with layer_allocation
  // tokens each layer's own layer_weight in tokens, at least its protected count and at most
  // --budget's per-head budget and what the layer holds.
  std::vector<int64_t> layer_budgets(int last, int64_t stage_total, const KVCache& cache) const;

  // layer_allocation mass (mass_budget.h): the protected count plus the mean over the layer's heads
  // of the fewest candidates whose prefill scores reach select.mass, rounded up.
  double mass_layer_budget(int layer, const KVCache& cache) const;

  // Whether every stored head of every layer holds the whole prompt: the cache the plan's static
  // budgets were split for (not a block of a prefill in blocks, not a layer already cut).
  bool holds_whole_prompt(const KVCache& cache) const;

  // score_at insertion with decode triggers: the prefill scores stay after prefill, kept aligned with
  // the cache, and each decoded entry is scored at its own step (without triggers nothing reads them).
  bool keeps_frozen_scores() const { return plan.select.frozen_scores; }

  // Whether each head's kept count is an output of the selection (recorded as its budget).
  bool kept_count_is_output() const { return plan.select.kept_count_is_output; }

  // Every eviction of a layer (prefill and decode) ends here (unfold_gqa's excepted, which the
  // engine checks keep away from merge-on-evict): a layer-level merge (d2o) sees every head's kept
  // set first, then each head is kept. `scores[h]`: what head h's selection ranked.
  void keep_layer(KVCache& cache, int layer, const std::vector<std::vector<int>>& kept,
                  const std::vector<std::span<const float>>& scores);

  // Where a merge of `layer` in this call runs (merge_on_evict's `rows`): the host cache, or, when
  // the call's host rows are placeholders, the decoder's device cache, which must have offered its
  // row merges (the declaration said so: cache_row_reads.h); refused otherwise.
  CachedRowMerges* merge_rows(int layer) const;

  // One head's eviction: a per-head merge (cam picks its merge candidates by `scores`), then the
  // compaction and the aligned state.
  void keep(KVCache& cache, int layer, int kv_head, const std::vector<int>& kept, std::span<const float> scores);

  // Keeps the stored prefill scores and accumulated attention of stored head `kv_head` aligned
  // with its cache entries after they were reduced from `length` entries to `kept` (indices below
  // `length`; `shape`: kept_list_shape(kept)). A held vector of another length is a bug of the
  // engine: refused before any index.
  void permute_aligned(int layer, int kv_head, const std::vector<int>& kept, const KeptListShape& shape,
                       size_t length);

  // EngineOptions::trace_selection: the latest scores and positions a head was selected from.
  struct SelectionTrace {
    std::vector<float> scores;
    std::vector<int32_t> positions;
    bool layer_wide = false;
  };
  mutable std::vector<std::vector<SelectionTrace>> traces;  // [layer][head], filled on demand
  void trace_selection(int layer, int head, std::span<const float> sc, std::span<const int32_t> pos,
                       bool layer_wide = false) const;
  void copy_trace(int layer, int head, HeadReport& r) const;

  HeadSelectionSpec spec_for(int layer, int kv_head, int budget, const ProtectedSet& pr) const;

  // Kept entries of heads `head[i]` of `layer` (or of a layer_shared layer, on the mean scores):
  // the chunk rule select asks for (chunk_selection.h, on the host), or the token rule with the
  // threshold's budget, all heads in one call of the layer selector (host, twin or device).
  std::vector<std::vector<int>> select_layer_entries(const std::vector<std::span<const float>>& sc,
                                                     const std::vector<std::span<const int32_t>>& pos, int layer,
                                                     const std::vector<int>& head, const std::vector<int>& budget,
                                                     const ProtectedSet& pr);
  std::vector<int> select_entries(std::span<const float> sc, std::span<const int32_t> pos, int layer, int head,
                                  int budget, const ProtectedSet& pr);

  // Per-head budgets of `layer` for a layer budget (uniform unless the policy plans heads).
  std::vector<int> head_budgets(const KVCache& cache, int layer, int budget, const ProtectedSet& pr) const;

  // Shrinks every head of `layer` to `budget` using the given scores (aligned with cache order),
  // never evicting the protected set `pr` (the prefill's, or the decoding phase's).
  void evict_layer(KVCache& cache, int layer, int budget, const std::vector<std::vector<float>>& head_scores,
                   const ProtectedSet& pr);

  // select.stages (staged_selection.h): every stage scores each head's current entries with its own
  // program (signals recomputed on the shrunk cache; a later stage gathers only what its program
  // reads) and keeps its share; kv_head scope (checked). `first_stage`, when given: the heads'
  // scores by the file's `score` over the cache as it is (the prompt's, made at each layer's turn),
  // taken as the first stage's when that stage is `score` instead of scoring again.
  void evict_staged(KVCache& cache, int layer, int budget, const ProtectedSet& pr,
                    const std::vector<std::vector<float>>* first_stage);

  // select.scope model (model_selection.h): one pool over every layer's and head's prefill scores.
  void evict_model(KVCache& cache);

  // score_at insertion: the newest `added` entries of every head of `layer` get their score now,
  // appended to the frozen scores (aligned with the cache: appends go to the end). A decode
  // indicator that scores each entry alone (dsl/entry_locality.h) is given those entries alone, the
  // same values as over the whole head; any other, the whole head.
  void score_new_entries(int layer, const KVCache& cache, int added);

  // request()'s asks for what the engine makes from the queries: the segment attention and the
  // prompt query statistics (from the decoder when a prompt with a known window comes next), or
  // every query of the block (a window found from the tokens, a prompt nobody announced).
  void ask_for_query_signals(ObservationRequest& r, bool prompt_next) const;

  // What each kind of next call reads of the cached rows (ObservationRequest::cache_row_reads,
  // host_rows_not_read_later), decided in engine_row_reads.cpp.
  struct RowReads;

  // The skip rule's verdict for this prompt (eviction_plan.h): no prefill eviction.
  bool skip_prefill() const { return plan.prefill.skip; }

  void prefill_layer(const LayerSignals& s, KVCache& cache, bool allow_cascading);
  // The announced plan becomes the prompt's, checked against the call that starts it
  // (std::logic_error when it was another prompt's).
  void take_announced_plan(const LayerSignals& s, int prompt_len);

  // What a layer of a forward call hands over that the engine keeps (queries, the decoder's window
  // attention, query and model signals, segments at prefill, accumulated attention, the merge
  // state's decode attention), timed as Signals.
  void record_layer_signals(const LayerSignals& s, const KVCache& cache, bool decoding);

  // A layer's scores and the eviction they lead to (at its own layer when cascading, else at the last).
  void evaluate_layer(int l, KVCache& cache, bool allow_cascading);

  // gqa unfold, one-shot: each query head keeps its own top-k of its KV head's entries (scores
  // were computed per query head), then the cache becomes one stored head per query head.
  void unfold_and_evict(KVCache& cache);

  void hold_output_projection(const LayerSignals& s);

  // Whether the waiting prefill needs the replay's scores (a prompt within the budget evicts nothing).
  bool awaits_replay() const { return replay_pending && !skip_prefill(); }

  // Scores and evicts every layer of the waiting prefill with A_replay from `r` (null: nothing to
  // evict, awaits_replay() false), then ends the prefill; `r` stays readable through finish_prefill.
  void complete_replay(const ReplayScores* r, KVCache& cache);

  // Whether the forward call that just ended completed the prompt (a prefill in blocks ends with
  // the block that reaches block_prompt tokens).
  bool prompt_complete() const { return block_prompt == 0 || prefill_seen >= block_prompt; }

  void finish_prefill(KVCache& cache);

  // Key-channel pruning (channel_selection.h): each head's channel_score on its signals as the
  // token selection left them (kvpress ComposedPress runs ThinK on SnapKV's output), once.
  void prune_key_channels(KVCache& cache);

  // Makes heads codebook-backed (codebook_stage.h); the cache's own byte counts are the report's.
  void apply_codebook(KVCache& cache);

  void fill_report(const KVCache& cache);
  // Head (l, h)'s kept count and sorted kept positions into the report, from the cache as it is
  // now: after the prompt and after every decode step. A head whose edit stamp is the one it was
  // last reported with only gained entries at its end: their positions are added (O(new entries)
  // where they come after the reported ones). Otherwise the list is rebuilt: O(T) for a head whose
  // positions increase along the cache (the positional kept order: no sort), O(T log T) if not.
  void report_head(const KVCache& cache, int l, int h);
  // The edit stamp (KVCache::edit_stamp) each report.layers[l][h] was made from, [l * heads + h];
  // empty or 0 (a value no stamp takes) where it must be rebuilt.
  std::vector<uint64_t> reported_stamps;

  // Layer l's per-head budget now: the prefill's, or run.decode_budget's value with decode_step =
  // the tokens appended since the prompt, so prompt_len + decode_step = tokens seen (layers split
  // as at prefill: a weighted split is scaled by decode_budget / budget).
  int decode_budget(int l) const;

  // Layer l's decode budget when its decode trigger evicts now (a threshold always evicts, below
  // the budget too: --budget full turns it off, select_entries; else some head holds more than its
  // budget + slack), -1 when it does not. Timed as Selection.
  int decode_budget_if_over(const KVCache& cache, int l);

  void decode_layer(const LayerSignals& s, KVCache& cache);

  // A threshold rule over frozen scores (threshold_steps.h): whether its decode steps may be decided
  // from the entries leaving the recent window (per-head selection in positional order, no merge,
  // stage, chunk, unfolding or re-assigned positions, whose every eviction would void the records,
  // no selection trace to fill), and each head's record of what was last checked, [layer][stored
  // head] (sized at first use).
  bool threshold_steps_from_window() const;
  std::vector<std::vector<ThresholdWindowRecord>> threshold_records;
  // Layer l's decode eviction under such a rule: from the window where every head's record applies,
  // else by evict_layer, after which each head is checked afresh for the next step.
  void evict_threshold_layer(KVCache& cache, int l, int budget);
};

}  // namespace kvevict
