// The eviction engine. Flow of one prompt (decoder forward #1): after_layer(l) records the layer's
// signals, computes its scores once (kept aligned with cache order) and, when cascading, re-splits
// the budget over layers 0..l and shrinks them all; otherwise the one-shot split happens at the last
// layer. after_forward ends the prefill (report, codebook stage). Later forward calls are decode
// steps: after_layer(l) applies the decode trigger of layer l.
#include "core/engine/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/decode/row_norms.h"
#include "core/engine/accumulated_attention_store.h"
#include "core/engine/attention_signals.h"
#include "core/engine/budget_allocator.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/channel_selection.h"
#include "core/engine/chunk_selection.h"
#include "core/engine/codebook_stage.h"
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
#include "core/engine/window_observation.h"
#include "core/util/error.h"
#include "core/util/stopwatch.h"

namespace kvevict {
namespace {

// rows [T][d] (the cache's layout) -> out [d][T] (the signal layout: t innermost, signals.h).
void transpose_rows(const float* rows, int T, int d, std::vector<float>& out) {
  out.resize(static_cast<size_t>(T) * d);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < d; ++c) out[static_cast<size_t>(c) * T + t] = rows[static_cast<size_t>(t) * d + c];
}

// Buffers behind one ScoreInputs, one per tensor signal (core/engine/signals.h).
struct HeadSignals {
  std::array<std::vector<float>, kNumTensorSignals> buffer;
  std::vector<float> key_scratch, value_scratch;  // a codebook head's keys/values, reconstructed
  ScoreInputs in;
};

}  // namespace

struct EvictionEngine::State {
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
  int appended = 0;  // tokens appended after the prompt (a decode forward may carry several: a question block)
  int block_prompt = 0;  // the prompt's length during a prefill in blocks (begin_block_prefill), else 0
  int prefill_seen = 0;  // prompt tokens in the cache so far (the end of the latest block)
  std::vector<int> layer_budget;  // per-head budget of each layer in force (the plan's when static)
  std::vector<double> layer_weight;                      // P_l when the policy has one
  // Head-level budgets (head_budgets.h), when the policy has head_mode / head_weight programs:
  // [layer][stored head] plans from prefill, and the budgets of the layer's last eviction.
  std::vector<std::vector<HeadPlan>> head_plans;
  std::vector<std::vector<int>> head_budget;
  // [layer][stored head][cache entry] prefill scores, released at the end of prefill: decode
  // triggers score afresh, and a kept vector would go stale as the decoder appends entries.
  std::vector<std::vector<std::vector<float>>> scores;
  std::vector<std::vector<std::vector<float>>> accumulated;  // [layer][query head][cache entry]
  // ... or held on the scoring device instead (accumulated_in_place; accumulated_attention_store.h).
  std::unique_ptr<AccumulatedAttentionStore> accumulated_device;
  RecentQueries recent;                                  // the newest query rows of each layer
  SegmentQueries segments;                               // observe.segment's observation queries
  uint64_t sampling_seed = 0;  // seed of the random share for the current application (sampling_seed_for_step)
  OriginalPositions original;  // active once the policy re-assigned the cache's positions
  MergeOnEvictState merge_state;  // what merge.method cam carries between evictions (merge_state.h)
  // The decoder's window attention of the current layer, when it offered the engine's own
  // (precomputed_window.h); held during one after_layer.
  PrecomputedWindow window_in;
  // Where token selections run (layer_selector.h): EngineOptions::selection, else the program's.
  std::unique_ptr<LayerSelector> selector;
  // The current prompt stage's evictions are followed by another that selects the same layers again
  // (cascading, before the last layer): the prompt's scores held in the selector must follow them.
  bool held_scores_selected_again = false;
  // The program may score from the decoder's device window attention in place (scores_signals_in_place).
  const bool window_in_place;
  // ... and A_acc from an accumulation on the device the program scores on (the selector's, not
  // the host), the decoder's device column sums added there: no download of the sums, no upload of
  // A_acc (accumulated_attention_store.h). Not for a policy that unfolds GQA (the decoder's sums are
  // per KV head's entries, the unfolded cache's heads per query head).
  const bool accumulated_in_place;
  // ... and writes its decode scores into the selector's device buffer, which the selection reads in
  // place (PolicyProgram::scores_to_device, LayerSelector::layer_score_buffer), in the steps whose
  // rule is a plain per-head selection (decode_scores_in_selector).
  const bool scores_to_selector;
  // ... and decode steps from the decoder's device column sums (A_now) without a host copy of them:
  // it reads A_now and nothing on the host reads the column sums (a host accumulation, a merge's
  // decode attention).
  const bool current_in_place;
  // ... and K and V from the decoder's device copy of the layer's cached rows (LayerSignals::
  // cache_rows), so a call whose programs read only those, A and row-free signals leaves its rows on
  // the device (cache_row_reads.h, CachedRowSignals::GivenOnDevice).
  const bool rows_in_place;
  // The decoder's device copy of the current after_layer call's cached rows, when rows_in_place.
  CacheRowsSignal decoder_rows;
  int decoder_rows_layer = -1;
  // What a one-token decode step and the prompt read of the cached rows (cache_row_reads.h):
  // fixed by the policy; request() narrows the prompt's per call.
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
  // KVzip (A_replay; replay_checks.h): the prompt's forward records but scores nothing; the
  // scores wait for the replay (finish_replay / apply_after_prefill). Meanwhile each layer's output
  // projection is held here, since the decoder's spans end with its after_layer.
  bool replay_pending = false;
  const ReplayScores* replay = nullptr;  // what A_replay reads while the waiting prefill completes
  std::vector<std::vector<float>> held_grams, held_projection;
  std::vector<float> replay_logits;  // the prompt's logits, copied before the replay's forwards

  // Phase accounting (EnginePhase): the slots of the current engine call (report.prefill_phases or
  // decode_phases; null outside a call) and the innermost phase running.
  EnginePhaseSeconds* phases = nullptr;
  std::optional<EnginePhase> phase;
  double& slot(EnginePhase p) {
    if (!phases) throw std::logic_error("engine: a phase timed outside an engine call");
    return (*phases)[p];
  }

  // Times phase `p` until its end, pausing the enclosing phase (Stopwatch's `paused`), so nested
  // phases never count an interval twice (the same phase nested in itself counts it once). Only on
  // the calling thread, never inside an OpenMP loop: the slots are plain doubles.
  class PhaseScope {
   public:
    PhaseScope(State& st, EnginePhase p)
        : st_(st), outer_(st.phase), watch_(&st.slot(p), outer_ ? &st.slot(*outer_) : nullptr) {
      st.phase = p;
    }
    ~PhaseScope() { st_.phase = outer_; }
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;

   private:
    State& st_;
    std::optional<EnginePhase> outer_;
    Stopwatch watch_;
  };

  // One entry into the engine (after_layer, after_forward, apply_after_prefill, finish_replay): its
  // time goes to report.seconds and, phase by phase, to the prefill or the decode phases; what no
  // PhaseScope inside covers is Other. The seconds' watch starts first and ends last, so the
  // phases of a call sum to at most its seconds.
  class EngineCall {
   public:
    EngineCall(State& st, bool decoding)
        : st_(st), seconds_(&st.report.seconds), other_(enter(st, decoding), EnginePhase::Other) {}
    ~EngineCall() { st_.phases = nullptr; }  // other_ has taken its slot's address already
    EngineCall(const EngineCall&) = delete;
    EngineCall& operator=(const EngineCall&) = delete;

   private:
    static State& enter(State& st, bool decoding) {
      st.phases = decoding ? &st.report.decode_phases : &st.report.prefill_phases;
      return st;
    }
    State& st_;
    Stopwatch seconds_;
    PhaseScope other_;
  };

  // Original positions of a head's entries (the cache's own unless they were re-assigned).
  const int32_t* positions(const KVCache& cache, int layer, int kv_head) const {
    return original.active() ? original.of(layer, kv_head) : cache.positions(layer, kv_head);
  }

  State(const PolicyProgram& p, const ModelConfig& c, EngineOptions o)
      : policy(p),
        desc(p.description()),
        config(c),
        options(std::move(o)),
        plan(plan_before_prompt(p, plan_geometry(p, c, options.budget), options.budget)),  // checks the policy
        L(plan.geometry.n_layers),
        Hkv(plan.geometry.n_kv_heads),
        Hq(plan.geometry.n_heads),
        G(plan.geometry.group),
        d(plan.geometry.head_dim),
        unfold(plan.geometry.unfold_gqa),
        Hs(plan.geometry.stored_heads),
        Gs(plan.geometry.stored_group),
        selector(make_layer_selector(options.selection.value_or(p.selection_device()))),
        window_in_place(scores_signals_in_place(p)),
        accumulated_in_place(scores_signals_in_place(p) && p.description().needs(TensorSignal::AccumulatedAttention) &&
                             selector_shares_program_memory(*selector, p) && !plan.geometry.unfold_gqa),
        scores_to_selector(p.scores_to_device() && selector_shares_program_memory(*selector, p)),
        current_in_place(scores_signals_in_place(p) && p.description().needs(TensorSignal::CurrentAttention) &&
                         !host_reads_column_sums()),
        rows_in_place(scores_signals_in_place(p) && (p.description().needs(TensorSignal::Keys) ||
                                                     p.description().needs(TensorSignal::Values))),
        decode_row_reads(decode_cache_row_reads(p.description(), cached_row_signals())),
        prompt_row_reads(prompt_cache_row_reads(p.description(), cached_row_signals())) {
    rope = Rope(c);
  }

  // Whether the selector's buffers (and the accumulated-attention store made for its device) are
  // memory the program reads and writes as its own: a device selector whose memory kind is the
  // program's (the CUDA selector for the CUDA backend; the twin, host memory, for a program that is
  // not the CUDA backend, as the tests' stand-in). A CUDA program with the twin selector would write
  // host addresses from a kernel: its scores and A_acc then take the host paths.
  static bool selector_shares_program_memory(const LayerSelector& selector, const PolicyProgram& p) {
    return selector.device() != SelectionDevice::Host &&
           (selector.device() == SelectionDevice::Cuda) == (p.selection_device() == SelectionDevice::Cuda);
  }

  // Whether the decoder's device window attention may go to the score program in place
  // (PrecomputedWindow::in_place), and the decoder's device column sums (A_now): the program takes
  // device signals (the CUDA scoring backend) and nothing on the host reads them: a layer weight
  // only when the program computes it on the device too (CAKE's generated layer kernel), no head
  // plan, extra stage programs or channel program, no signal the engine derives from A, not NACL's
  // own map.
  static bool scores_signals_in_place(const PolicyProgram& p) {
    const PolicyDescription& d = p.description();
    return p.scores_device_signals() && (!d.has_layer_weight || p.layer_weight_takes_device_signals()) &&
           !d.has_head_plan && d.select.stages.empty() &&
           !d.channels.enabled && !d.observe.same_index_head && !d.needs(TensorSignal::WindowQueryRows) &&
           !d.needs(TensorSignal::WindowQueryRowsPreRope) && !d.needs(TensorSignal::WindowOutputs);
  }

  // Whether something on the host reads a block's column sums: a host accumulation of A_acc or a
  // merge's decode attention (merge_state.h). Else a decoder may keep them on its device.
  bool host_reads_column_sums() const {
    return (desc.needs(TensorSignal::AccumulatedAttention) && !accumulated_in_place) ||
           MergeOnEvictState::needs_decode_attention(desc.merge);
  }

  CachedRowSignals cached_row_signals() const {
    return rows_in_place ? CachedRowSignals::GivenOnDevice : CachedRowSignals::ReadOnHost;
  }

  // K or V of stored head `src` of `layer` (T entries) in the decoder's device copy, when it made
  // one for this call and the head is exactly that long; null otherwise (the host's rows then).
  const float* decoder_rows_of(TensorSignal id, int layer, int src, int T) const {
    const float* base = id == TensorSignal::Keys ? decoder_rows.keys : decoder_rows.values;
    if (!base || unfold || layer != decoder_rows_layer || decoder_rows.head_dim != d || src >= decoder_rows.n_heads() ||
        decoder_rows.length[static_cast<size_t>(src)] != T)
      return nullptr;
    return base + decoder_rows.offset[static_cast<size_t>(src)];
  }

  // The cache head holding stored head s's entries: its KV head while an unfolding policy's cache
  // is still folded (during prefill), s itself otherwise.
  int cache_head(int s, const KVCache& cache) const { return unfold && !cache.unfolded() ? s / G : s; }

  int query_window() const { return plan.query_window; }

  void reset() {
    report = EvictionReport{};
    report.policy = desc.name;
    report.budget = options.budget.text;
    report.selection = selector->device();
    in_prefill = prefill_done = false;
    prompt_had_placeholders = false;
    decode_step = appended = 0;
    sampling_seed = options.seed;
    layer_budget.assign(L, 0);
    layer_weight.assign(L, 1.0);
    head_plans.assign(L, {});
    head_budget.assign(L, {});
    scores.assign(L, std::vector<std::vector<float>>(Hs));
    selector->release_score_buffers();
    accumulated.assign(L, std::vector<std::vector<float>>());
    if (accumulated_in_place) {
      if (!accumulated_device) accumulated_device = make_accumulated_attention_store(selector->device());
      accumulated_device->reset(L, Hs, Gs);
    }
    recent.reset(L, static_cast<size_t>(Hq) * d);
    original.clear();
    window_in.reset_counts();
    merge_state.reset(desc.merge, L, Hq);
    records.reset(L, desc.needs(TensorSignal::Token), desc.needs(TensorSignal::HiddenNorm),
                  desc.needs(TensorSignal::HiddenState) ? config.dim : 0);
    if (reads_query_statistics(desc))
      query_stats.reset(L, Hq, d, desc.needs(TensorSignal::QueryCovariance), desc.observe.query_stats_from);
  }

  // What the query and model signals need from a block (query_signals.h, model_signals.h).
  void record_query_and_model_signals(const LayerSignals& s) {
    records.record(s);
    output_grams = s.output_grams;
    output_projection = s.output_projection;
    if (!query_stats.active() || !in_prefill) return;
    if (s.window != s.n_tokens)
      throw std::logic_error("engine: Q_mean needs every query of the prompt; the decoder handed " +
                             std::to_string(s.window) + " of " + std::to_string(s.n_tokens));
    query_stats.record(s.layer, s.window_queries.data(), s.n_tokens, s.first_position, rope);
  }

  // Q_mean ([Gs][d]) or Q_cov ([Gs][d][d]) of one head, rotated as observe.query_rotation says.
  void query_statistic(TensorSignal id, int layer, int kv_head, std::vector<float>& out) const {
    std::vector<double> R;
    if (desc.observe.query_rotation == QueryRotation::FutureMean)
      R = average_rope_rotation(config, plan.prompt_len, desc.observe.rope_future);
    std::vector<float> mean(static_cast<size_t>(Gs) * d);
    const bool cov = id == TensorSignal::QueryCovariance;
    if (cov) out.resize(static_cast<size_t>(Gs) * d * d);
    query_stats.head_statistics(layer, kv_head, Gs, R.empty() ? nullptr : R.data(), mean.data(), cov ? out.data() : nullptr);
    if (!cov) out.swap(mean);
  }

  // Appends the block's window queries to the rolling buffer of the layer (keeps the newest rows).
  void record_queries(const LayerSignals& s) {
    recent.record(s.layer, s.window_queries.data(), s.window, s.first_position + s.n_tokens - s.window, query_window());
  }

  // The query rows a layer's window attention is computed from now: the newest min(window, rows)
  // recorded queries ([W][Hq][d] at `rows`), the first at position `first`; W = 0 when none.
  struct WindowRows {
    const float* rows = nullptr;
    int W = 0, first = 0;
  };
  WindowRows window_rows(int layer) const {
    const int rows = recent.rows(layer);
    if (plan.window <= 0 || rows == 0) return {};
    const int W = std::min(plan.window, rows), skip = rows - W;
    return {recent.data(layer) + static_cast<size_t>(skip) * Hq * d, W, recent.first_position(layer) + skip};
  }

  // Whether the policy's window attention is one a decoder may compute for it
  // (ObservationRequest::window_attention): scaled, the G query heads of each KV head, causal or
  // not (window_attention_causal: NACL's official proxy is not); not NACL's same_index_head map.
  bool decoder_window_attention() const { return plan.window > 0 && !desc.observe.same_index_head; }

  // ObservationRequest::window_attention: the policy's window when a decoder may compute its A,
  // while a prompt is pending if the window is known before the prompt (not from the prompt's
  // length or tokens), and while decoding if the decode trigger reads A (the window is the
  // prompt's then); 0 otherwise.
  int requested_window_attention() const {
    if (!decoder_window_attention()) return 0;
    if (!prefill_done || in_prefill) return window_known_before_prompt(desc) ? plan.window : 0;
    const bool decode_reads = plan.decode.every > 0 && plan.decode.uses_window_attention;
    return decode_reads ? plan.window : 0;
  }

  // Holds the decoder's window attention of the block's layer when it is the engine's own (after
  // record_queries: the window rows are the layer's newest). Not over re-assigned positions: the
  // engine's causal mask reads the original ones.
  void offer_window_attention(const LayerSignals& s, const KVCache& cache) {
    if (!decoder_window_attention() || original.active()) return;
    const WindowRows r = window_rows(s.layer);
    window_in.offer(s, r.W, r.first, G, desc.observe.causal, cache);
  }

  // A_now of KV head kv_head's query heads from the decoder's one-token column sums ([Gs][T]): the
  // host cache holds placeholder rows, so it is not computed from the cached keys. The host copy
  // when the decoder made one, else its device copy, downloaded once per layer (the decoder's
  // thread: decode steps score their heads one after another).
  void copy_decoder_current_attention(int kv_head, int T, float* out) {
    if (!decoder_current_attention) {
      const ColumnSumsSignal& c = decoder_current_device;
      if (T > c.row_stride || (kv_head + 1) * Gs > c.n_heads)
        throw std::logic_error("engine: the decoder's device column sums do not cover head " +
                               std::to_string(kv_head) + " of " + std::to_string(T) + " entries");
      if (current_host.empty()) {
        download_column_sums(c, current_host);
        ++report.current_attention_downloads;
      }
      for (int g = 0; g < Gs; ++g)
        std::copy_n(current_host.data() + static_cast<size_t>(kv_head * Gs + g) * c.row_stride, T,
                    out + static_cast<size_t>(g) * T);
      return;
    }
    for (int g = 0; g < Gs; ++g) {
      const std::vector<float>& row = decoder_current_attention->at(static_cast<size_t>(kv_head * Gs + g));
      if (static_cast<int>(row.size()) != T)  // the decoder's row covers the head as it attended it
        throw std::logic_error("engine: the decoder's current attention has " + std::to_string(row.size()) +
                               " entries for a head of " + std::to_string(T));
      std::copy_n(row.data(), T, out + static_cast<size_t>(g) * T);
    }
  }

  // Entries of each stored head of `layer` in the cache now.
  std::vector<int64_t> stored_lengths(const KVCache& cache, int layer) const {
    std::vector<int64_t> lengths(static_cast<size_t>(Hs));
    for (int h = 0; h < Hs; ++h) lengths[h] = cache.length(layer, h);
    return lengths;
  }

  // Adds the block's attention column sums to the stored accumulated attention of the layer: on the
  // device, from the decoder's device sums where it left them there, else from its host ones.
  void record_accumulated(const LayerSignals& s, const KVCache& cache) {
    if (!desc.needs(TensorSignal::AccumulatedAttention)) return;
    if (accumulated_in_place) {
      const std::vector<int64_t> lengths = stored_lengths(cache, s.layer);
      if (!s.column_sums_on_device.empty()) {
        accumulated_device->add(s.layer, lengths, s.column_sums_on_device);
        ++report.accumulated_attention_device_adds;
      } else if (s.accumulated_attention) {
        accumulated_device->add(s.layer, lengths, *s.accumulated_attention);
      } else {
        throw std::logic_error("engine: the decoder did not record accumulated attention");
      }
      return;
    }
    if (!s.accumulated_attention) throw std::logic_error("engine: the decoder did not record accumulated attention");
    auto& acc = accumulated[s.layer];
    acc.resize(Hq);
    for (int h = 0; h < Hq; ++h) {
      const std::vector<float>& add = (*s.accumulated_attention)[h];
      const int T = cache.length(s.layer, cache.stored_head_of_query(h));
      acc[h].resize(T, 0.0f);
      for (int t = 0; t < T && t < static_cast<int>(add.size()); ++t) acc[h][t] += add[t];
    }
  }

  // The signals of one head, timed as Signals: for the calling thread (score_layer_at_prefill's
  // parallel loop calls gather_signals and times the loop).
  HeadSignals signals_for(int layer, int kv_head, const KVCache& cache, bool decoding) {
    PhaseScope timed(*this, EnginePhase::Signals);
    return gather_signals(layer, kv_head, cache, decoding);
  }

  // Refuses a read of `what` (cached keys or values) of layer `layer` in a call whose host rows are
  // placeholders: the policy declared it reads no cached row (cache_row_reads.h), so the read is a
  // bug of that declaration, which must fail loudly rather than score placeholder zeros.
  void refuse_placeholder_read(int layer, const std::string& what) const {
    if (!placeholder_rows) return;
    throw std::logic_error("engine: policy " + desc.name + " needs " + what + " of layer " + std::to_string(layer) +
                           " on the host, but the decoder left this call's rows on the device (placeholder rows): "
                           "the policy declared that it reads no cached row here (cache_row_reads.h)");
  }

  // The signals the programs of this phase read (the decode indicator's while decoding, the
  // prompt-time programs' otherwise). With placeholder rows only those are made: another signal
  // of the policy (CAKE's A_now at the prompt) would read rows for nobody.
  const SignalSet& phase_reads(bool decoding) const {
    if (decoding) return desc.decode_reads_known ? desc.decode_reads : desc.reads;
    return prompt_signals(desc);
  }
  bool makes_signal(TensorSignal id, bool decoding) const {
    return desc.needs(id) && (!placeholder_rows || phase_reads(decoding)[signal_index(id)]);
  }

  // `window_out`, when given, receives the window attention ([G][W][T], T = the head's length)
  // instead of the head's own vector. Untimed: safe on worker threads. The head's keys and values
  // are read only by the signals that need them (refuse_placeholder_read).
  HeadSignals gather_signals(int layer, int kv_head, const KVCache& cache, bool decoding, float* window_out = nullptr) {
    HeadSignals hs;
    const int src = cache_head(kv_head, cache);
    const int T = cache.length(layer, src);
    ScoreInputs& in = hs.in;
    in.layer = layer;
    in.kv_head = kv_head;
    in.n_layers = L;
    in.n_kv_heads = Hs;
    in.group = Gs;
    in.head_dim = d;
    in.n_embd = config.dim;
    in.T = T;
    in.prompt_len = plan.prompt_len;
    in.decode_step = decoding ? decode_step + 1 : 0;
    in.seed = options.seed;
    in.position = positions(cache, layer, src);
    const float* cached_keys = nullptr;
    const auto keys = [&](const char* why) {
      if (!cached_keys) {
        refuse_placeholder_read(layer, std::string("the cached keys (") + why + ")");
        cached_keys = cache.keys_or_reconstruct(layer, src, hs.key_scratch);
      }
      return cached_keys;
    };
    const auto values = [&](const char* why) {
      refuse_placeholder_read(layer, std::string("the cached values (") + why + ")");
      return cache.values_or_reconstruct(layer, src, hs.value_scratch);
    };
    const int rows = recent.rows(layer);
    const float* q = recent.data(layer);
    // Made whenever there is a window (Q and O read it too), but with placeholder rows only for
    // programs of this phase that read it.
    const bool want_window = plan.window > 0 && (!decoding || plan.decode.uses_window_attention) &&
                             (!placeholder_rows || phase_reads(decoding)[signal_index(TensorSignal::WindowAttention)]);
    if (const WindowRows wr = window_rows(layer); want_window && wr.W > 0) {
      const int W = wr.W, first = wr.first;
      std::vector<float>& own = hs.buffer[signal_index(TensorSignal::WindowAttention)];
      // The decoder's, in place on the device for a program that reads it there (no download, no
      // upload: scores_signals_in_place), where its rows are exactly the head's: at a prefill, and
      // at a decode step over the rolling window when the layer's heads are equally long.
      const float* device_rows = window_in_place && !unfold ? window_in.in_place(layer, src, W, first, T) : nullptr;
      if (device_rows) {
        in.W = W;
        in.set_device_signal(TensorSignal::WindowAttention, device_rows);
      } else if (!desc.observe.same_index_head) {
        if (!window_out) {  // no layer-shared buffer: the head's own
          own.resize(static_cast<size_t>(Gs) * W * T);
          window_out = own.data();
        }
        // The decoder's, copied out when it is exactly this (precomputed_window.h); else the host's.
        if (!window_in.copy(layer, src, kv_head * Gs, Gs, W, first, T, window_out))
          compute_window_attention(wr.rows, W, Hq, first, kv_head, Gs, keys("the window attention"), in.position, T,
                                   d, window_out, desc.observe.causal);
      } else {  // never with unfold_gqa (rejected), so kv_head is a KV head and the cache is its own
        in.group = observe_same_index_head(desc.observe.causal, WindowQueries{wr.rows, W, Hq, first}, cache, layer,
                                           kv_head, G, keys("the same-index head's attention"), own);
        window_out = own.data();
      }
      if (!device_rows) {
        in.W = W;
        in.set_signal(TensorSignal::WindowAttention, window_out);
      }
    }
    // Every other signal the policy reads, by its row in the signal table.
    for (const TensorSignalInfo& info : kTensorSignalTable) {
      if (!makes_signal(info.id, decoding)) continue;
      std::vector<float>& out = hs.buffer[signal_index(info.id)];
      switch (info.id) {
        case TensorSignal::WindowAttention:  // produced above (it may share a layer buffer)
        case TensorSignal::Position:         // in.position
          continue;
        case TensorSignal::CurrentAttention:
          if (rows == 0) continue;
          // In place on the device when the head's rows are exactly [G][T] there (a layer whose
          // heads are equally long: CAKE's, TOVA's): no download, no upload.
          if (current_in_place && !decoder_current_device.empty() && T == decoder_current_device.row_stride) {
            in.set_device_signal(info.id, decoder_current_device.data + static_cast<size_t>(kv_head) * Gs * T);
            ++report.current_attention_in_place;
            continue;
          }
          out.resize(static_cast<size_t>(Gs) * T);
          if (decoder_current_attention || !decoder_current_device.empty()) {
            copy_decoder_current_attention(kv_head, T, out.data());
            break;
          }
          compute_window_attention(q + static_cast<size_t>(rows - 1) * Hq * d, 1, Hq,
                                   recent.first_position(layer) + rows - 1, kv_head, Gs, keys("A_now"), in.position, T,
                                   d, out.data());
          break;
        case TensorSignal::AccumulatedAttention:
          if (accumulated_in_place) {  // [Gs][T] on the scoring device, in place
            in.set_device_signal(info.id, accumulated_device->head(layer, stored_lengths(cache, layer), kv_head));
            ++report.accumulated_attention_in_place;
            continue;
          }
          out.resize(static_cast<size_t>(Gs) * T);
          for (int g = 0; g < Gs; ++g)
            std::copy_n(accumulated[layer][kv_head * Gs + g].data(), T, out.data() + static_cast<size_t>(g) * T);
          break;
        case TensorSignal::KeyNorm:
        case TensorSignal::ValueNorm: {
          out.resize(T);
          const bool key = info.id == TensorSignal::KeyNorm;
          // A head whose rows are on a device holds their norms (KVCache::held_row_norms, the same
          // bits as from the rows: row_norms.h); any other head computes them from its rows.
          if (cache.rows_held_elsewhere(layer, src)) {
            const std::span<const RowNorms> held = cache.held_row_norms(layer, src);
            for (int t = 0; t < T; ++t) out[t] = key ? held[t].key : held[t].value;
          } else if (T > 0) {
            compute_row_norms(key ? keys("key_norm") : values("value_norm"), T, d, out.data());
          }
          break;
        }
        case TensorSignal::Keys:
        case TensorSignal::Values:
          // In place on the decoder's device (no row on the host, no upload), else the host's rows.
          if (const float* device = decoder_rows_of(info.id, layer, src, T)) {
            in.set_device_signal(info.id, device);
            continue;
          }
          if (info.id == TensorSignal::Keys) transpose_rows(keys("K"), T, d, out);
          else transpose_rows(values("V"), T, d, out);
          break;
        case TensorSignal::KeysPreRope:
          refuse_placeholder_read(layer, "the cached keys (K_pre)");
          transpose_rows(cache.keys_pre_rope(layer, src).data(), T, d, out);
          break;
        case TensorSignal::SegmentAttention:  // prefill only (checked): segment_observation.h
          out.resize(static_cast<size_t>(Gs) * T);
          segments.attention(layer, kv_head, Gs, Hq, keys("A_seg"), in.position, T, d, desc.observe.causal,
                             desc.observe.scaled, out.data());
          break;
        case TensorSignal::WindowQueryRows:
        case TensorSignal::WindowQueryRowsPreRope:
        case TensorSignal::WindowOutputs:
          if (!window_rows_signal(info.id, layer, kv_head, cache, keys("Q, Q_pre or O"), in, hs, out)) continue;
          break;
        case TensorSignal::QueryMean:
        case TensorSignal::QueryCovariance:
          query_statistic(info.id, layer, kv_head, out);
          break;
        case TensorSignal::RopeFuture: {  // [d][d]: R x = mean of rope(x, p), p = prompt_len ..
          const std::vector<double> R = average_rope_rotation(config, plan.prompt_len, desc.observe.rope_future);
          out.assign(R.begin(), R.end());
          break;
        }
        case TensorSignal::Token:
          out.resize(T);
          records.tokens(in.position, T, out.data());
          break;
        case TensorSignal::HiddenNorm:
          out.resize(T);
          records.hidden_norms(layer, in.position, T, out.data());
          break;
        case TensorSignal::HiddenState:
          out.resize(static_cast<size_t>(config.dim) * T);
          records.hidden_states(layer, in.position, T, out.data());
          break;
        case TensorSignal::OutputNorm:
          if (output_grams.size() != static_cast<size_t>(Hq) * d * d)
            throw UsageError("policy " + desc.name + " reads out_norm, but the decoder did not hand over the layer's "
                             "output projection");
          out.resize(static_cast<size_t>(Gs) * T);
          output_norms(output_grams.data(), kv_head, Gs, d, values("out_norm"), T, out.data());
          break;
        case TensorSignal::ReplayAttention:  // [Gs][T] by original position (the replay's cache index)
          if (!replay) throw std::logic_error("engine: A_replay read outside the completion of a replay prefill");
          out.resize(static_cast<size_t>(Gs) * T);
          for (int g = 0; g < Gs; ++g)
            for (int t = 0; t < T; ++t) {
              const int p = in.position[t];
              out[static_cast<size_t>(g) * T + t] = p >= 0 && p < replay->length ? replay->at(layer, kv_head * Gs + g, p) : 0.0f;
            }
          break;
        case TensorSignal::OutputNormL1:
          if (output_projection.empty() || output_projection.size() % (static_cast<size_t>(Hq) * d) != 0)
            throw UsageError("policy " + desc.name + " reads out_norm_l1, but the decoder did not hand over the layer's "
                             "output projection");
          out.resize(static_cast<size_t>(Gs) * T);
          output_norms_l1(output_projection.data(), static_cast<int>(output_projection.size() / (static_cast<size_t>(Hq) * d)),
                          kv_head, Gs, d, values("out_norm_l1"), T, out.data());
          break;
      }
      in.set_signal(info.id, out.data());
    }
    return hs;
  }

  // Q, Q_pre or O of one head from the newest min(window, rows) window queries (query_signals.h);
  // false when there are no window rows (the signal then stays null, as A does).
  bool window_rows_signal(TensorSignal id, int layer, int kv_head, const KVCache& cache, const float* keys,
                          ScoreInputs& in, HeadSignals& hs, std::vector<float>& out) const {
    const WindowRows wr = window_rows(layer);
    if (wr.W == 0) return false;
    const int W = wr.W;
    const WindowQueries q{wr.rows, W, Hq, wr.first};
    const float* values = id == TensorSignal::WindowOutputs
                              ? cache.values_or_reconstruct(layer, cache_head(kv_head, cache), hs.value_scratch)
                              : nullptr;
    in.W = W;
    window_query_signal(id, q, kv_head, Gs, rope, in.signal(TensorSignal::WindowAttention), keys, values, in.position,
                        in.T, d, desc.observe.causal, out);
    return true;
  }

  std::vector<float> score(const HeadSignals& hs, bool decoding) {
    PhaseScope timed(*this, EnginePhase::Scoring);
    std::vector<float> out(hs.in.T, 0.0f);
    if (hs.in.on_device(TensorSignal::Keys) || hs.in.on_device(TensorSignal::Values)) ++report.cache_rows_in_place;
    policy.score(hs.in, decoding && plan.decode.own_score, out.data());
    return out;
  }

  // The length of every KV head of `layer`, which a layer-shared selection needs equal (std::logic_error).
  int layer_shared_length(const KVCache& cache, int layer) const {
    const int T = cache.length(layer, 0);
    for (int h = 1; h < Hs; ++h)
      if (cache.length(layer, h) != T)
        throw std::logic_error("layer_shared selection: KV heads of layer " + std::to_string(layer) + " differ in length");
    return T;
  }

  // Whether a decode eviction's scores go straight into the selector's buffer: the program writes
  // them there and nothing on the host reads them (a per-head top-k, Ada-KV's layer-wide ranking or
  // TOVA's layer-shared one: no staged, chunked or threshold rule, no merge, no trace).
  bool decode_scores_in_selector() const {
    return scores_to_selector && plan.select.stages == 0 &&
           !chunked_selection(desc.select) && !plan.select.threshold && !options.trace_selection &&
           !plan.stages.merge_on_evict && !plan.stages.merge_per_layer;
  }
  // ... and a prompt's: the same rules, in a prompt that evicts (not skipped), layer by layer (no
  // model-wide pool, no unfolded GQA), with no host reader of the prompt's scores (frozen scores kept
  // for decoding, the mass allocation). They then wait in the selector's per-layer buffers for the
  // layer's selections (one, or one per later layer when cascading) and are given back after the
  // layer's last one (keep_layer).
  bool prefill_scores_in_selector() const {
    return decode_scores_in_selector() && plan.prefill.evicts && !skip_prefill() && !unfold &&
           plan.select.scope != SelectScope::Model && !keeps_frozen_scores() &&
           plan.select.layer_allocation != LayerAllocation::Mass;
  }

  // A decode eviction of `layer` whose scores never come to the host: each head's decode indicator
  // written into the layer's selector buffer by the program (on its device), then the selection
  // from there (select_from_selector).
  void evict_layer_scored_in_selector(KVCache& cache, int layer, int budget, const ProtectedSet& pr, int step) {
    const std::vector<int64_t> lengths = stored_lengths(cache, layer);
    float* buffer = selector_buffer(layer, lengths);
    for (int h = 0; h < Hs; ++h) {
      const HeadSignals hs = signals_for(layer, h, cache, true);
      score_into_selector(layer, hs, lengths, h, buffer, plan.decode.own_score);
      ++report.scores_in_place;
    }
    sampling_seed = sampling_seed_for_step(options.seed, step);
    select_from_selector(cache, layer, budget, pr);
  }

  // Layer `layer`'s selector buffer laid for heads of `lengths` entries (timed as Selection).
  float* selector_buffer(int layer, const std::vector<int64_t>& lengths) {
    PhaseScope timed(*this, EnginePhase::Selection);
    return selector->layer_score_buffer(layer, lengths);
  }

  // Head h's scores written by the program into its place in layer `layer`'s selector buffer.
  void score_into_selector(int layer, const HeadSignals& hs, const std::vector<int64_t>& lengths, int h, float* buffer,
                           bool decoding) {
    if (hs.in.T != lengths[h])
      throw std::logic_error("engine: head " + std::to_string(h) + " of layer " + std::to_string(layer) + " scored " +
                             std::to_string(hs.in.T) + " entries of " + std::to_string(lengths[h]));
    PhaseScope timed(*this, EnginePhase::Scoring);
    if (hs.in.on_device(TensorSignal::Keys) || hs.in.on_device(TensorSignal::Values)) ++report.cache_rows_in_place;
    policy.score_on_device(hs.in, decoding, buffer + layer_score_offset(lengths, static_cast<size_t>(h)));
  }

  // The selection of `layer` from the scores in its selector buffer: every head's (a per-head top-k),
  // Ada-KV's joint ranking of the layer's heads, or TOVA's one selection on their mean (evict_layer's
  // branches, whose scores are host spans).
  void select_from_selector(KVCache& cache, int layer, int budget, const ProtectedSet& pr) {
    const std::vector<int64_t> lengths = stored_lengths(cache, layer);
    PhaseScope timed(*this, EnginePhase::Selection);
    if (plan.select.scope == SelectScope::Layer) {
      std::vector<std::span<const int32_t>> pos(Hs);
      for (int h = 0; h < Hs; ++h)
        pos[h] = std::span<const int32_t>(positions(cache, layer, h), static_cast<size_t>(lengths[h]));
      ++report.layer_selections;
      keep_layer(cache, layer,
                 selector->select_layer_adaptive_from_buffer(layer, pos, std::vector<int>(Hs, budget), pr.first, pr.recent,
                                                             plan.select.floor_alpha,
                                                             plan.select.kept_order == KeptOrder::Score),
                 std::vector<std::span<const float>>(Hs));
      return;
    }
    if (plan.select.scope == SelectScope::LayerShared) {  // one decision on the heads' mean (evict_layer)
      const int T = layer_shared_length(cache, layer);
      ++report.layer_selections;
      const std::vector<int> kept = selector->select_layer_shared_from_buffer(
          layer, Hs, std::span<const int32_t>(positions(cache, layer, 0), static_cast<size_t>(T)),
          spec_for(layer, 0, budget, pr));
      keep_layer(cache, layer, std::vector<std::vector<int>>(Hs, kept), std::vector<std::span<const float>>(Hs));
      return;
    }
    const std::vector<int> budgets = head_budgets(cache, layer, budget, pr);
    if (desc.has_head_plan) head_budget[layer] = budgets;
    std::vector<std::span<const int32_t>> pos(Hs);
    std::vector<HeadSelectionSpec> specs;
    for (int h = 0; h < Hs; ++h) {
      pos[h] = std::span<const int32_t>(positions(cache, layer, h), static_cast<size_t>(lengths[h]));
      specs.push_back(spec_for(layer, h, budgets[h], pr));
    }
    ++report.layer_selections;
    keep_layer(cache, layer, selector->select_heads_from_buffer(layer, pos, specs),
               std::vector<std::span<const float>>(Hs));
  }

  // A prompt layer's scores written into its selector buffer (prefill_scores_in_selector), where
  // they wait for the layer's selections; none are held on the host.
  void score_layer_into_selector(int layer, const std::vector<HeadSignals>& heads, const KVCache& cache) {
    const std::vector<int64_t> lengths = stored_lengths(cache, layer);
    float* buffer = selector_buffer(layer, lengths);
    for (int h = 0; h < Hs; ++h) {
      std::vector<float>().swap(scores[layer][h]);
      score_into_selector(layer, heads[h], lengths, h, buffer, false);
      ++report.prefill_scores_in_place;
    }
  }

  // Prefill: scores of every head of the layer and the layer weight.
  void score_layer_at_prefill(int layer, const KVCache& cache) {
    // The W x T window products dominate; heads are independent. Scores stay serial (a policy
    // program need not be thread-safe).
    std::vector<HeadSignals> heads(Hs);
    // The heads' window attention side by side in one buffer, so that a layer-level program
    // (CAKE's layer weight) reads them in place instead of copying them together.
    const int T = cache.length(layer, cache_head(0, cache));
    bool same_length = !desc.observe.same_index_head;  // same_index_head gives one head, not G
    for (int h = 1; h < Hs; ++h) same_length = same_length && cache.length(layer, cache_head(h, cache)) == T;
    // Every head scored from the decoder's device buffer in place: nothing to download or gather.
    const WindowRows wr = window_rows(layer);
    const bool in_place = window_in_place && !unfold && wr.W > 0 && window_in.in_place_for_every_head(layer, wr.W, wr.first);
    same_length = same_length && !in_place;
    const size_t per_head = static_cast<size_t>(Gs) * std::min(plan.window, recent.rows(layer)) * T;
    std::vector<float> layer_window_attention(same_length ? per_head * Hs : 0);  // [Hs][Gs][W][T]
    {
      PhaseScope timed(*this, EnginePhase::Signals);  // the loop as a whole: no timing on worker threads
      if (!in_place) window_in.fetch();  // a device buffer comes down here, not on a worker thread
      // An exception must not leave an OpenMP region (std::terminate): the first is kept and
      // rethrown after the loop (refuse_placeholder_read, a decoder's signal of the wrong shape).
      std::exception_ptr failed;
      std::mutex failed_mutex;
      // A_acc's pending rebuild (a device launch) runs here, on the thread whose device is current,
      // not on a worker: the workers' head() calls then only read.
      if (accumulated_in_place && Hs > 0) accumulated_device->head(layer, stored_lengths(cache, layer), 0);
#pragma omp parallel for schedule(static) if (Hs > 1 && cache.length(layer, 0) * plan.window > 65536)
      for (int h = 0; h < Hs; ++h) {
        try {
          heads[h] =
              gather_signals(layer, h, cache, false, same_length ? layer_window_attention.data() + per_head * h : nullptr);
        } catch (...) {
          std::lock_guard<std::mutex> lock(failed_mutex);
          if (!failed) failed = std::current_exception();
        }
      }
      if (failed) std::rethrow_exception(failed);
    }
    if (prefill_scores_in_selector()) {
      score_layer_into_selector(layer, heads, cache);
    } else {
      for (int h = 0; h < Hs; ++h) scores[layer][h] = score(heads[h], false);
    }
    PhaseScope timed(*this, EnginePhase::Scoring);  // the head plans and the layer weight
    if (desc.has_head_plan) {
      head_plans[layer].clear();
      for (int h = 0; h < Hs; ++h) head_plans[layer].push_back(policy.head_plan(heads[h].in));
    }
    if (desc.has_layer_weight) {
      LayerWeightInputs lw;
      lw.layer = layer;
      lw.n_layers = L;
      lw.prompt_len = plan.prompt_len;
      lw.budget = plan.budget.tokens_per_head;
      for (auto& h : heads) lw.heads.push_back(h.in);
      layer_weight[layer] = policy.layer_weight(lw);
    }
  }

  // Budgets of layers 0..last: `stage_total` split by weight, floors = protected, caps = what each holds.
  std::vector<int64_t> split(int last, int64_t stage_total, const KVCache& cache) const {
    std::vector<double> w(last + 1);
    std::vector<int64_t> lo(last + 1), hi(last + 1);
    for (int k = 0; k <= last; ++k) {
      w[k] = desc.has_layer_weight ? layer_weight[k] : 1.0;
      hi[k] = cache.length(k, 0);
      for (int h = 1; h < cache.n_stored_heads(); ++h) hi[k] = std::min<int64_t>(hi[k], cache.length(k, h));
      lo[k] = plan.budget.protected_floor;
    }
    return allocate_budgets(w, lo, hi, stage_total);
  }

  // Budgets of layers 0..last: the weighted split of `stage_total`, or with layer_allocation
  // tokens each layer's own layer_weight in tokens, at least its protected count and at most
  // --budget's per-head budget and what the layer holds.
  std::vector<int64_t> layer_budgets(int last, int64_t stage_total, const KVCache& cache) const {
    if (plan.static_layer_budgets() && last == L - 1 && stage_total == plan.budget.total && holds_whole_prompt(cache))
      return std::vector<int64_t>(plan.budget.layer.begin(), plan.budget.layer.end());
    if (plan.select.layer_allocation == LayerAllocation::Share) return split(last, stage_total, cache);
    const double cap = plan.budget.tokens_per_head;
    std::vector<int64_t> out(last + 1);
    for (int k = 0; k <= last; ++k) {
      int64_t held = cache.length(k, 0);
      for (int h = 1; h < cache.n_stored_heads(); ++h) held = std::min<int64_t>(held, cache.length(k, h));
      const double own = plan.select.layer_allocation == LayerAllocation::Mass ? mass_layer_budget(k, cache) : layer_weight[k];
      const double want = std::min({own, cap, static_cast<double>(held)});
      out[k] = std::max<int64_t>(plan.budget.protected_floor, std::llround(std::max(0.0, want)));
    }
    return out;
  }

  // layer_allocation mass (mass_budget.h): the protected count plus the mean over the layer's heads
  // of the fewest candidates whose prefill scores reach select.mass, rounded up.
  double mass_layer_budget(int layer, const KVCache& cache) const {
    double sum = 0;
    for (int h = 0; h < Hs; ++h) {
      const int T = cache.length(layer, cache_head(h, cache));
      sum += mass_count(std::span<const float>(scores[layer][h].data(), T),
                        std::span<const int32_t>(positions(cache, layer, cache_head(h, cache)), T), plan.protect.first,
                        plan.protect.recent, plan.select.mass);
    }
    return plan.budget.protected_floor + std::ceil(sum / Hs);
  }

  // Whether every stored head of every layer holds the whole prompt: the cache the plan's static
  // budgets were split for (not a block of a prefill in blocks, not a layer already cut).
  bool holds_whole_prompt(const KVCache& cache) const {
    for (int k = 0; k < L; ++k)
      for (int h = 0; h < cache.n_stored_heads(); ++h)
        if (cache.length(k, h) != plan.prompt_len) return false;
    return true;
  }

  // score_at insertion with decode triggers: the prefill scores stay after prefill, kept aligned with
  // the cache, and each decoded entry is scored at its own step (without triggers nothing reads them).
  bool keeps_frozen_scores() const { return plan.select.frozen_scores; }

  // Whether each head's kept count is an output of the selection (recorded as its budget).
  bool kept_count_is_output() const { return plan.select.kept_count_is_output; }

  // Every eviction of a layer (prefill and decode) ends here (unfold_gqa's excepted, which the
  // engine checks keep away from merge-on-evict): a layer-level merge (d2o) sees every head's kept
  // set first, then each head is kept. `scores[h]`: what head h's selection ranked.
  void keep_layer(KVCache& cache, int layer, const std::vector<std::vector<int>>& kept,
                  const std::vector<std::span<const float>>& scores) {
    PhaseScope timed(*this, EnginePhase::CacheEdit);
    if (plan.stages.merge_per_layer) merge_state.merge_layer(desc.merge, cache, layer, kept, merge_rows(layer));
    for (int h = 0; h < Hs; ++h) keep(cache, layer, h, kept[h], scores[h]);
    // The prompt's scores held in the selector follow the cache when a later cascading stage selects
    // the layer again; after the layer's last selection of the prompt they are given back.
    if (in_prefill && prefill_scores_in_selector()) {
      if (held_scores_selected_again) {
        selector->keep_in_buffer(layer, kept);
      } else {
        selector->release_score_buffer(layer);
      }
    }
  }

  // Where a merge of `layer` in this call runs (merge_on_evict's `rows`): the host cache, or, when
  // the call's host rows are placeholders, the decoder's device cache, which must have offered its
  // row merges (the declaration said so: cache_row_reads.h); refused otherwise.
  CachedRowMerges* merge_rows(int layer) const {
    if (!placeholder_rows) return nullptr;
    if (!decoder_merges) refuse_placeholder_read(layer, "the cached rows (a merge the decoder did not offer)");
    return decoder_merges;
  }

  // One head's eviction: a per-head merge (cam picks its merge candidates by `scores`), then the
  // compaction and the aligned state.
  void keep(KVCache& cache, int layer, int kv_head, const std::vector<int>& kept, std::span<const float> scores) {
    PhaseScope timed(*this, EnginePhase::CacheEdit);
    const size_t length = cache.length(layer, kv_head);
    if (plan.stages.merge_on_evict && !plan.stages.merge_per_layer)  // folds the evicted in first
      merge_on_evict(desc.merge, cache, layer, kv_head, kept,
                     merge_state.context(layer, kv_head, Gs, static_cast<int>(length), scores, sampling_seed,
                                         std::span<const int32_t>(positions(cache, layer, kv_head), length)),
                     merge_rows(layer));
    window_in.drop_layer(layer);  // the decoder's window attention no longer matches the layer
    if (layer == decoder_rows_layer) {  // nor its copy of the rows
      decoder_rows = {};
      decoder_rows_layer = -1;
    }
    cache.keep(layer, kv_head, kept);
    permute_aligned(layer, kv_head, kept, length);
    original.kept(layer, kv_head, kept);
  }

  // Keeps the stored prefill scores and accumulated attention of stored head `kv_head` aligned
  // with its cache entries after they were reduced from `length` entries to `kept` (indices below
  // `length`). A held vector of another length is a bug of the engine: refused before any index.
  void permute_aligned(int layer, int kv_head, const std::vector<int>& kept, size_t length) {
    auto permute = [&](std::vector<float>& v) {
      if (v.empty()) return;
      if (v.size() != length)
        throw std::logic_error("engine: per-entry state of layer " + std::to_string(layer) + " head " +
                               std::to_string(kv_head) + " holds " + std::to_string(v.size()) +
                               " entries, the cache " + std::to_string(length));
      std::vector<float> next(kept.size());
      for (size_t i = 0; i < kept.size(); ++i) next[i] = v[kept[i]];
      v.swap(next);
    };
    permute(scores[layer][kv_head]);
    if (accumulated_in_place) accumulated_device->keep(layer, kv_head, kept, static_cast<int64_t>(length));
    if (!accumulated[layer].empty())
      for (int g = 0; g < Gs; ++g) permute(accumulated[layer][kv_head * Gs + g]);
    merge_state.kept(layer, kv_head, Gs, kept, length);
  }

  // EngineOptions::trace_selection: the latest scores and positions a head was selected from.
  struct SelectionTrace {
    std::vector<float> scores;
    std::vector<int32_t> positions;
    bool layer_wide = false;
  };
  mutable std::vector<std::vector<SelectionTrace>> traces;  // [layer][head], filled on demand
  void trace_selection(int layer, int head, std::span<const float> sc, std::span<const int32_t> pos,
                       bool layer_wide = false) const {
    if (traces.size() != static_cast<size_t>(L)) traces.assign(L, {});
    auto& row = traces[layer];
    if (row.size() <= static_cast<size_t>(head)) row.resize(static_cast<size_t>(head) + 1);
    row[head].scores.assign(sc.begin(), sc.end());
    row[head].positions.assign(pos.begin(), pos.end());
    row[head].layer_wide = layer_wide;
  }
  void copy_trace(int layer, int head, HeadReport& r) const {
    if (static_cast<size_t>(layer) >= traces.size() || static_cast<size_t>(head) >= traces[layer].size()) return;
    r.selection_scores = traces[layer][head].scores;
    r.selection_positions = traces[layer][head].positions;
    r.selection_layer_wide = traces[layer][head].layer_wide;
  }

  HeadSelectionSpec spec_for(int layer, int kv_head, int budget, const ProtectedSet& pr) const {
    HeadSelectionSpec s;
    s.budget = budget;
    s.protect_first = pr.first;
    s.protect_recent = pr.recent;
    s.random_share = plan.select.random_share;
    s.temperature = plan.select.temperature;
    s.score_order = plan.select.kept_order == KeptOrder::Score;
    s.seed = sampling_seed;
    s.layer = layer;
    s.kv_head = kv_head;
    return s;
  }

  // Kept entries of heads `head[i]` of `layer` (or of a layer_shared layer, on the mean scores):
  // the chunk rule select asks for (chunk_selection.h, on the host), or the token rule with the
  // threshold's budget, all heads in one call of the layer selector (host, twin or device).
  std::vector<std::vector<int>> select_layer_entries(const std::vector<std::span<const float>>& sc,
                                                     const std::vector<std::span<const int32_t>>& pos, int layer,
                                                     const std::vector<int>& head, const std::vector<int>& budget,
                                                     const ProtectedSet& pr) {
    PhaseScope timed(*this, EnginePhase::Selection);
    const size_t n = sc.size();
    if (options.trace_selection)
      for (size_t i = 0; i < n; ++i) trace_selection(layer, head[i], sc[i], pos[i]);
    std::vector<std::vector<int>> kept(n);
    if (chunked_selection(desc.select)) {
      for (size_t i = 0; i < n; ++i) kept[i] = select_chunked(sc[i], pos[i], desc.select, budget[i], pr.first, pr.recent);
      return kept;
    }
    std::vector<HeadSelectionSpec> specs;
    for (size_t i = 0; i < n; ++i) {
      int b = budget[i];
      if (plan.select.threshold)  // --budget full turns it off
        b = threshold_budget(sc[i], pos[i], b, pr.first, pr.recent, plan.select.threshold_value);
      specs.push_back(spec_for(layer, head[i], b, pr));
    }
    ++report.layer_selections;
    return selector->select_heads(sc, pos, specs);
  }
  std::vector<int> select_entries(std::span<const float> sc, std::span<const int32_t> pos, int layer, int head,
                                  int budget, const ProtectedSet& pr) {
    return std::move(select_layer_entries({sc}, {pos}, layer, {head}, {budget}, pr).front());
  }

  // Per-head budgets of `layer` for a layer budget (uniform unless the policy plans heads).
  std::vector<int> head_budgets(const KVCache& cache, int layer, int budget, const ProtectedSet& pr) const {
    if (!desc.has_head_plan || static_cast<int>(head_plans[layer].size()) != Hs) return std::vector<int>(Hs, budget);
    std::vector<int> length(Hs);
    for (int h = 0; h < Hs; ++h) length[h] = static_cast<int>(cache.length(layer, h));
    return split_head_budgets(budget, head_plans[layer], length, pr.first + pr.recent, plan.select.head_allocation);
  }

  // Shrinks every head of `layer` to `budget` using the given scores (aligned with cache order),
  // never evicting the protected set `pr` (the prefill's, or the decoding phase's).
  void evict_layer(KVCache& cache, int layer, int budget, const std::vector<std::vector<float>>& head_scores,
                   const ProtectedSet& pr) {
    PhaseScope timed(*this, EnginePhase::Selection);  // the keeps, and a staged rule's signals and scores, pause it
    if (plan.select.stages > 0) {
      evict_staged(cache, layer, budget, pr);
    } else if (plan.select.scope == SelectScope::Layer) {
      std::vector<std::span<const float>> sc;
      std::vector<std::span<const int32_t>> pos;
      for (int h = 0; h < Hs; ++h) {
        sc.emplace_back(head_scores[h].data(), head_scores[h].size());
        pos.emplace_back(positions(cache, layer, h), cache.length(layer, h));
      }
      if (options.trace_selection)  // one joint ranking over the layer's heads
        for (int h = 0; h < Hs; ++h) trace_selection(layer, h, sc[h], pos[h], true);
      ++report.layer_selections;
      const auto kept = selector->select_layer_adaptive(sc, pos, std::vector<int>(Hs, budget), pr.first, pr.recent,
                                                        plan.select.floor_alpha,
                                                        plan.select.kept_order == KeptOrder::Score);
      keep_layer(cache, layer, kept, sc);
    } else if (plan.select.scope == SelectScope::LayerShared) {
      // TOVA (spec §5.3): one decision per layer on the mean of the KV heads' scores. Every head
      // has kept the same positions in the same order so far, so one index list fits all.
      const int T = layer_shared_length(cache, layer);
      std::vector<float> packed(static_cast<size_t>(Hs) * T), mean(T);
      for (int h = 0; h < Hs; ++h) std::copy_n(head_scores[h].data(), T, packed.data() + static_cast<size_t>(h) * T);
      for (int t = 0; t < T; ++t) mean[t] = layer_shared_mean_element(packed.data(), Hs, T, t);
      const auto kept = select_entries(std::span<const float>(mean.data(), T),
                                       std::span<const int32_t>(positions(cache, layer, 0), T), layer, 0, budget, pr);
      if (options.trace_selection)  // every head was selected on the mean (head 0 traced above)
        for (int h = 1; h < Hs; ++h)
          trace_selection(layer, h, mean, std::span<const int32_t>(positions(cache, layer, h), T));
      keep_layer(cache, layer, std::vector<std::vector<int>>(Hs, kept),
                 std::vector<std::span<const float>>(Hs, std::span<const float>(mean)));
    } else {
      const std::vector<int> budgets = head_budgets(cache, layer, budget, pr);
      if (desc.has_head_plan) head_budget[layer] = budgets;
      std::vector<std::span<const float>> sc(Hs);
      std::vector<std::span<const int32_t>> pos(Hs);
      std::vector<int> heads(Hs);
      for (int h = 0; h < Hs; ++h) {
        const int T = cache.length(layer, h);
        sc[h] = std::span<const float>(head_scores[h].data(), T);
        pos[h] = std::span<const int32_t>(positions(cache, layer, h), T);
        heads[h] = h;
      }
      keep_layer(cache, layer, select_layer_entries(sc, pos, layer, heads, budgets, pr), sc);
    }
  }

  // select.stages (staged_selection.h): every stage scores each head's current entries with its own
  // program (signals recomputed on the shrunk cache) and keeps its share; kv_head scope (checked).
  void evict_staged(KVCache& cache, int layer, int budget, const ProtectedSet& pr) {
    const size_t n = desc.select.stages.size();
    if (plan.select.stage_shares) {  // shares of one budget, all scored on the same cache
      std::vector<double> shares;
      for (const PolicySelect::Stage& stage : desc.select.stages) shares.push_back(stage.share);
      for (int h = 0; h < Hs; ++h) {
        const HeadSignals hs = signals_for(layer, h, cache, false);
        std::vector<std::vector<float>> sc(n, std::vector<float>(hs.in.T, 0.0f));
        std::vector<std::span<const float>> spans;
        for (size_t i = 0; i < n; ++i) {
          {
            PhaseScope timed(*this, EnginePhase::Scoring);
            policy.stage_score(desc.select.stages[i].program, hs.in, sc[i].data());
          }
          spans.emplace_back(sc[i]);
        }
        keep(cache, layer, h,
             select_shares(spans, std::span<const int32_t>(positions(cache, layer, h), hs.in.T), shares, budget, pr.first,
                           pr.recent, plan.select.kept_order == KeptOrder::Score),
             spans.front());
      }
      return;
    }
    for (size_t i = 0; i < n; ++i)
      for (int h = 0; h < Hs; ++h) {
        const PolicySelect::Stage& stage = desc.select.stages[i];
        const HeadSignals hs = signals_for(layer, h, cache, false);
        std::vector<float> sc(hs.in.T, 0.0f);
        {
          PhaseScope timed(*this, EnginePhase::Scoring);
          policy.stage_score(stage.program, hs.in, sc.data());
        }
        const int T = hs.in.T;
        const int k = stage_keep_count(T, stage.keep, budget, i + 1 == n);
        keep(cache, layer, h, select_entries(sc, std::span<const int32_t>(positions(cache, layer, h), T), layer, h, k, pr), sc);
      }
  }

  // select.scope model (model_selection.h): one pool over every layer's and head's prefill scores.
  void evict_model(KVCache& cache) {
    PhaseScope timed(*this, EnginePhase::Selection);  // keep_layer pauses it
    std::vector<std::vector<std::span<const float>>> sc(L);
    std::vector<std::vector<std::span<const int32_t>>> pos(L);
    for (int k = 0; k < L; ++k)
      for (int h = 0; h < Hs; ++h) {
        sc[k].emplace_back(scores[k][h].data(), scores[k][h].size());
        pos[k].emplace_back(positions(cache, k, h), cache.length(k, h));
      }
    const auto kept = select_model_wide(sc, pos, layer_budget, plan.protect.first, plan.protect.recent,
                                        plan.select.kept_order == KeptOrder::Score);
    for (int k = 0; k < L; ++k) keep_layer(cache, k, kept[k], sc[k]);
  }

  // score_at insertion: the newest `added` entries of every head of `layer` get their score now,
  // appended to the frozen scores (aligned with the cache: appends go to the end).
  void score_new_entries(int layer, const KVCache& cache, int added) {
    for (int h = 0; h < Hs; ++h) {
      std::vector<float>& frozen = scores[layer][h];
      const int T = cache.length(layer, h);
      if (static_cast<int>(frozen.size()) + added != T)
        throw std::logic_error("engine: frozen scores of layer " + std::to_string(layer) + " head " + std::to_string(h) +
                               " hold " + std::to_string(frozen.size()) + " entries, the cache " + std::to_string(T) +
                               " after " + std::to_string(added) + " new");
      const std::vector<float> now = score(signals_for(layer, h, cache, true), true);
      frozen.insert(frozen.end(), now.end() - added, now.end());
    }
  }

  // ObservationRequest::cache_row_reads. A call at position 0 starts a prompt; a later call
  // continues a prefill in blocks (its next block), or is a decode step once the prompt is done
  // (several tokens then: block_call_row_reads). A fresh engine takes a later call as a prompt over
  // rows it never saw: Reads.
  CacheRowReadsByCall cache_row_reads_by_call() const {
    CacheRowReadsByCall by;
    const bool blocks_pending = in_prefill && block_prompt > 0 && prefill_seen < block_prompt;
    by.prompt_start = prompt_call_row_reads();
    if (blocks_pending) {
      by.next_token = by.next_block = prompt_call_row_reads();
    } else if (prefill_done && !in_prefill) {
      by.next_token = decode_call_row_reads();
      by.next_block = block_call_row_reads();
    }
    return by;
  }

  // Whether the next call after the prompt triggers the decode eviction (one step, whatever its tokens).
  bool next_call_triggers() const {
    const int next = decode_step + 1;
    return plan.decode.every > 0 && next % plan.decode.every == 0;
  }

  // A several-token call after the prompt (the eval sweep's question block, teacher forcing): None
  // when it does not trigger the decode eviction and the host does not work on every appended row
  // (it records by position and column sums, and scores nothing: SnapKV, and R-KV or CAM between
  // their triggers); else Reads (the decode indicator's A_now must be the block's last query's
  // row, which its column sums are not).
  CacheRowReads block_call_row_reads() const {
    return !next_call_triggers() && !host_works_on_every_append() ? CacheRowReads::None : CacheRowReads::Reads;
  }

  // A decode step's declaration. A step that does not trigger the decode eviction (decode_every
  // > 1: R-KV every 128 steps, CAM every 512) scores nothing, so it reads no row whatever the
  // indicator reads (None): its rows come to the host once, at the next trigger step. Unless the
  // scores are frozen at insertion (scored every step) or the host works on every appended row (a
  // codebook's approximation, key channels). NoneGivenDecoderSignals over the rolling window's A
  // only while the decoder is asked for the window attention (the decode trigger reads A).
  CacheRowReads decode_call_row_reads() const {
    if (!next_call_triggers() && !host_works_on_every_append()) return CacheRowReads::None;
    if (decode_row_reads != CacheRowReads::NoneGivenDecoderSignals) return decode_row_reads;
    const bool reads_window = desc.run.decode_uses_window_attention;
    return !reads_window || requested_window_attention() > 0 ? decode_row_reads : CacheRowReads::Reads;
  }

  // The host works on every appended row: scores frozen at insertion, a codebook's approximation,
  // key channels, an unfolded cache.
  bool host_works_on_every_append() const {
    return keeps_frozen_scores() || unfold || desc.channels.enabled ||
           (desc.merge.enabled && desc.merge.method == MergeMethod::Codebook);
  }

  // ObservationRequest::host_rows_not_read_later: no decode step reads a row on the host (no decode
  // eviction, or one over row-free signals: None), so a device cache may drop the host's copy of
  // its rows after this call (a later call that reads rows, a question block, brings them back).
  // Not while a prefill in blocks has blocks to come after this call, nor for a context replay or
  // a host that works on every append (their calls read the rows again).
  bool host_rows_not_read_later() const {
    if (host_works_on_every_append() || reads_replay(desc)) return false;
    if (block_prompt > 0) {
      const int remaining = in_prefill ? block_prompt - prefill_seen : block_prompt;
      if (remaining > plan.prefill.block) return false;
    }
    return plan.decode.every <= 0 || decode_row_reads == CacheRowReads::None;
  }

  // The prompt's declaration: NoneGivenDecoderSignals holds for a policy with a window only when
  // the decoder is asked for the window attention (it then covers the newest min(W, position)
  // queries, a later block's previous ones included, or does not serve it: the decoder's
  // serves_window_attention). K and V on the device are asked for whenever rows_in_place (request()).
  CacheRowReads prompt_call_row_reads() const {
    if (prompt_row_reads != CacheRowReads::NoneGivenDecoderSignals) return prompt_row_reads;
    return desc.window <= 0 || requested_window_attention() > 0 ? prompt_row_reads : CacheRowReads::Reads;
  }

  // The skip rule's verdict for this prompt (eviction_plan.h): no prefill eviction.
  bool skip_prefill() const { return plan.prefill.skip; }

  void prefill_layer(const LayerSignals& s, KVCache& cache, bool allow_cascading) {
    const int l = s.layer;
    const bool later_block = block_prompt > 0 && s.first_position > 0;  // the prompt's state carries on
    if (l == 0 && !later_block) {
      reset();
      in_prefill = true;
      const int prompt_len = block_prompt > 0 ? block_prompt : s.first_position + s.n_tokens;
      if (desc.observe.window_after_token >= 0 && static_cast<int>(s.tokens.size()) != s.n_tokens)
        throw std::logic_error("engine: the decoder did not hand over the prompt's tokens");
      plan = make_eviction_plan(policy, plan.geometry, options.budget, prompt_len, s.tokens);
      if (desc.observe.segment > 0)
        segments.reset(L, desc.observe.segment, plan.window, prompt_len, static_cast<size_t>(Hq) * d);
      report.prompt_len = prompt_len;
      report.bytes_full = cache.bytes_for_uniform_length(prompt_len);
    }
    if (l == 0) prefill_seen = s.first_position + s.n_tokens;
    prompt_had_placeholders = prompt_had_placeholders || s.cache_rows_are_placeholders;
    if (prefill_seen > plan.prompt_len)
      throw UsageError("policy " + desc.name + ": the prefill in blocks received " + std::to_string(prefill_seen) +
                       " tokens for a prompt of " + std::to_string(plan.prompt_len));
    record_layer_signals(s, cache, /*decoding=*/false);
    if (l == 0 && !later_block) replay_pending = reads_replay(desc);
    if (replay_pending) {
      hold_output_projection(s);
      report.peak_bytes = std::max(report.peak_bytes, cache.bytes_in_use());
      return;
    }
    evaluate_layer(l, cache, allow_cascading);
  }

  // What a layer of a forward call hands over that the engine keeps (queries, the decoder's window
  // attention, query and model signals, segments at prefill, accumulated attention, the merge
  // state's decode attention), timed as Signals.
  void record_layer_signals(const LayerSignals& s, const KVCache& cache, bool decoding) {
    PhaseScope timed(*this, EnginePhase::Signals);
    record_queries(s);
    offer_window_attention(s, cache);
    record_query_and_model_signals(s);
    if (!decoding && desc.observe.segment > 0)
      segments.record(s.layer, s.window_queries.data(), s.window, s.first_position + s.n_tokens - s.window);
    record_accumulated(s, cache);
    if (decoding) merge_state.record_decode(s, cache);
  }

  // A layer's scores and the eviction they lead to (at its own layer when cascading, else at the last).
  void evaluate_layer(int l, KVCache& cache, bool allow_cascading) {
    score_layer_at_prefill(l, cache);
    report.peak_bytes = std::max(report.peak_bytes, cache.bytes_in_use());
    if (!plan.prefill.evicts || skip_prefill()) return;
    const bool cascading = allow_cascading && plan.prefill.cascading;
    if (!cascading && l != L - 1) return;
    // Layers not seen yet keep their floors out of the stage total (CAKE splits B_total over the
    // seen layers; each layer also keeps its window), so the last stage splits exactly the total.
    const int64_t stage_total = plan.budget.total - static_cast<int64_t>(L - 1 - l) * plan.budget.protected_floor;
    {
      PhaseScope timed(*this, EnginePhase::Selection);
      const auto budgets = layer_budgets(l, stage_total, cache);
      for (int k = 0; k <= l; ++k) layer_budget[k] = static_cast<int>(budgets[k]);
    }
    held_scores_selected_again = cascading && l < L - 1;
    if (unfold) {
      unfold_and_evict(cache);
    } else if (plan.select.scope == SelectScope::Model) {
      evict_model(cache);
    } else {
      for (int k = 0; k <= l; ++k) {
        if (prefill_scores_in_selector()) {
          select_from_selector(cache, k, layer_budget[k], plan.protect);
        } else {
          evict_layer(cache, k, layer_budget[k], scores[k], plan.protect);
        }
      }
    }
    report.prefill_evicted = true;
    ++report.applications;
  }

  // gqa unfold, one-shot: each query head keeps its own top-k of its KV head's entries (scores
  // were computed per query head), then the cache becomes one stored head per query head.
  void unfold_and_evict(KVCache& cache) {
    std::vector<std::vector<std::vector<int>>> kept(L);
    PhaseScope selecting(*this, EnginePhase::Selection);  // the edit below pauses it
    for (int k = 0; k < L; ++k) {
      std::vector<std::span<const float>> sc(Hs);
      std::vector<std::span<const int32_t>> pos(Hs);
      std::vector<HeadSelectionSpec> specs(Hs);
      for (int s = 0; s < Hs; ++s) {
        const int src = cache_head(s, cache), T = cache.length(k, src);
        sc[s] = std::span<const float>(scores[k][s].data(), T);
        pos[s] = std::span<const int32_t>(cache.positions(k, src), T);
        specs[s] = spec_for(k, s, layer_budget[k], plan.protect);
      }
      ++report.layer_selections;
      kept[k] = selector->select_heads(sc, pos, specs);
    }
    PhaseScope editing(*this, EnginePhase::CacheEdit);
    std::vector<std::vector<size_t>> length(L, std::vector<size_t>(Hs));
    for (int k = 0; k < L; ++k)
      for (int s = 0; s < Hs; ++s) length[k][s] = cache.length(k, cache_head(s, cache));
    window_in.drop();
    cache.unfold_keep(kept);
    for (int k = 0; k < L; ++k)
      for (int s = 0; s < Hs; ++s) permute_aligned(k, s, kept[k][s], length[k][s]);
  }

  void hold_output_projection(const LayerSignals& s) {
    PhaseScope timed(*this, EnginePhase::Signals);
    held_grams.resize(L);
    held_projection.resize(L);
    held_grams[s.layer].assign(s.output_grams.begin(), s.output_grams.end());
    held_projection[s.layer].assign(s.output_projection.begin(), s.output_projection.end());
  }

  // Whether the waiting prefill needs the replay's scores (a prompt within the budget evicts nothing).
  bool awaits_replay() const { return replay_pending && !skip_prefill(); }

  // Scores and evicts every layer of the waiting prefill with A_replay from `r` (null: nothing to
  // evict, awaits_replay() false), then ends the prefill; `r` stays readable through finish_prefill.
  void complete_replay(const ReplayScores* r, KVCache& cache) {
    if (!replay_pending) throw std::logic_error("engine: no prefill waits for a replay");
    if (!r && awaits_replay()) throw std::logic_error("engine: the prefill needs the replay's scores");
    if (r && (r->n_layers != L || r->n_heads != Hq || r->n_kv_heads != Hkv || r->length != plan.prompt_len))
      throw std::invalid_argument("engine: the replay scores are for " + std::to_string(r->n_layers) + " layers x " +
                                  std::to_string(r->n_heads) + " heads x " + std::to_string(r->length) +
                                  " entries, the prefill has " + std::to_string(L) + " x " + std::to_string(Hq) + " x " +
                                  std::to_string(plan.prompt_len));
    replay_pending = false;
    replay = r;
    if (r)
      for (int l = 0; l < L; ++l) {
        output_grams = held_grams[l];
        output_projection = held_projection[l];
        evaluate_layer(l, cache, /*allow_cascading=*/false);  // cascading is refused with A_replay
      }
    output_grams = output_projection = {};
    std::vector<std::vector<float>>().swap(held_grams);
    std::vector<std::vector<float>>().swap(held_projection);
    finish_prefill(cache);
    replay = nullptr;
  }

  // Whether the forward call that just ended completed the prompt (a prefill in blocks ends with
  // the block that reaches block_prompt tokens).
  bool prompt_complete() const { return block_prompt == 0 || prefill_seen >= block_prompt; }

  void finish_prefill(KVCache& cache) {
    in_prefill = false;
    block_prompt = 0;
    prefill_done = true;
    if (!report.prefill_evicted) {  // budgets still govern decode-time triggers
      PhaseScope timed(*this, EnginePhase::Selection);
      const auto budgets = layer_budgets(L - 1, plan.budget.total, cache);
      for (int k = 0; k < L; ++k) layer_budget[k] = static_cast<int>(budgets[k]);
    }
    // (Re-assigned positions are not among these: the holder of the rows re-rotates them.)
    if (prompt_had_placeholders && ((unfold && !cache.unfolded()) || plan.stages.prune_key_channels || plan.stages.codebook))
      throw std::logic_error("engine: policy " + desc.name + " edits the cached rows at the end of its prompt "
                             "(unfolded GQA, key channels or a codebook), but the decoder left the prompt's rows on "
                             "the device (placeholder rows; cache_row_reads.h)");
    {
      PhaseScope timed(*this, EnginePhase::CacheEdit);  // the key-channel stage's signals and scores pause it
      if (unfold && !cache.unfolded()) {  // nothing evicted: every query head still gets its own copy
        cache.unfold();
        report.peak_bytes = std::max(report.peak_bytes, cache.bytes_in_use());
      }
      if (plan.stages.prune_key_channels) prune_key_channels(cache);
      if (plan.stages.codebook) apply_codebook(cache);
      // Re-assigned even when nothing was evicted (then an identity): from here on the decoder
      // appends at the cache length, as StreamingLLM's official code does.
      if (plan.stages.reassign_positions) original.start_and_reassign(cache);
    }
    fill_report(cache);
    selector->release_score_buffers();  // the prompt's held scores (a decode eviction lays its own)
    if (keeps_frozen_scores()) return;  // frozen: they stay aligned with the cache
    for (auto& layer : scores)
      for (auto& head : layer) std::vector<float>().swap(head);
  }

  // Key-channel pruning (channel_selection.h): each head's channel_score on its signals as the
  // token selection left them (kvpress ComposedPress runs ThinK on SnapKV's output), once.
  void prune_key_channels(KVCache& cache) {
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < Hs; ++h) {
        const HeadSignals hs = signals_for(l, h, cache, false);
        PhaseScope timed(*this, EnginePhase::Scoring);  // channel_score, and the zeroing it decides
        report.pruned_key_channels += static_cast<int64_t>(prune_head_channels(policy, hs.in, cache).size());
      }
  }

  // Makes heads codebook-backed (codebook_stage.h); the cache's own byte counts are the report's.
  void apply_codebook(KVCache& cache) {
    Stopwatch sw(&report.codebook_seconds);
    // The graphs where the selection runs (a CUDA device for the CUDA backend): LayerSelector::similarity_graph.
    const CodebookStageResult r = apply_codebook_stage(desc.merge, cache, selector->similarity_graph());
    report.bytes_before_codebook = r.bytes_before;
    report.bytes_codebook = r.bytes_after;
    report.key_codes = r.key_codes;
    report.value_codes = r.value_codes;
    report.codebook_tokens = r.tokens;
    report.codebook_graphs_by_selector = r.graphs_by_builder;
  }

  void fill_report(const KVCache& cache) {
    report.stored_heads = cache.n_stored_heads();
    report.gqa_unfolded = cache.unfolded();
    report.layers.assign(L, std::vector<HeadReport>(cache.n_stored_heads()));
    for (int l = 0; l < L; ++l) {
      for (int h = 0; h < cache.n_stored_heads(); ++h) {
        HeadReport& r = report.layers[l][h];
        r.budget = h < static_cast<int>(head_budget[l].size()) ? head_budget[l][h] : layer_budget[l];
        r.kept = cache.length(l, h);
        if (kept_count_is_output()) r.budget = r.kept;
        const int32_t* pos = positions(cache, l, h);
        r.kept_positions.assign(pos, pos + r.kept);
        std::sort(r.kept_positions.begin(), r.kept_positions.end());
        if (options.trace_selection) copy_trace(l, h, r);
      }
    }
    report.bytes_kept = cache.bytes_in_use();
  }

  // Layer l's per-head budget now: the prefill's, or run.decode_budget's value with decode_step =
  // the tokens appended since the prompt, so prompt_len + decode_step = tokens seen (layers split
  // as at prefill: a weighted split is scaled by decode_budget / budget).
  int decode_budget(int l) const {
    if (!plan.decode.has_budget) return layer_budget[l];
    const double b0 = plan.budget.tokens_per_head;
    const double b = policy.decode_budget_for(plan.prompt_len, appended, b0);
    if (!(b >= 0 && b <= 1e9))
      throw UsageError("policy " + desc.name + ": run.decode_budget is " + std::to_string(b) + " after " +
                       std::to_string(appended) + " generated tokens (prompt of " + std::to_string(plan.prompt_len) +
                       " tokens); a budget must be a number of tokens in 0..10^9");
    const double scaled = desc.has_layer_weight && b0 > 0 ? layer_budget[l] * (b / b0) : b;
    return static_cast<int>(std::floor(scaled + 0.5));
  }

  // Layer l's decode budget when its decode trigger evicts now (a threshold always evicts, below
  // the budget too: --budget full turns it off, select_entries; else some head holds more than its
  // budget + slack), -1 when it does not. Timed as Selection.
  int decode_budget_if_over(const KVCache& cache, int l) {
    PhaseScope timed(*this, EnginePhase::Selection);
    const int budget = decode_budget(l);
    bool over = plan.select.threshold;
    const std::vector<int> budgets = head_budgets(cache, l, budget, plan.decode.protect);
    for (int h = 0; h < Hs; ++h) over |= cache.length(l, h) > budgets[h] + plan.decode.slack;
    return over ? budget : -1;
  }

  void decode_layer(const LayerSignals& s, KVCache& cache) {
    const int l = s.layer;
    // Placeholder rows on the host: A_now is the decoder's row (a one-token block's column sums).
    const bool from_decoder = s.cache_rows_are_placeholders && s.n_tokens == 1 && !unfold;
    decoder_current_attention = from_decoder ? s.accumulated_attention : nullptr;
    decoder_current_device = from_decoder ? s.column_sums_on_device : ColumnSumsSignal{};
    struct Forget {
      State& st;
      ~Forget() {
        st.decoder_current_attention = nullptr;
        st.decoder_current_device = {};
        st.current_host.clear();
      }
    } forget{*this};
    original.appended(l, cache, s.first_position);
    record_layer_signals(s, cache, /*decoding=*/true);
    const int step = decode_step + 1;
    if (l == 0) appended += s.n_tokens;
    const bool frozen = keeps_frozen_scores();
    if (frozen) score_new_entries(l, cache, s.n_tokens);  // every step, trigger or not: at its own step
    if (plan.decode.every <= 0 || step % plan.decode.every != 0) return;
    const int budget = decode_budget_if_over(cache, l);
    if (budget < 0) return;
    if (!frozen && decode_scores_in_selector()) {
      evict_layer_scored_in_selector(cache, l, budget, plan.decode.protect, step);
    } else {
      std::vector<std::vector<float>> sc(Hs);
      for (int h = 0; h < Hs; ++h) sc[h] = frozen ? scores[l][h] : score(signals_for(l, h, cache, true), true);
      sampling_seed = sampling_seed_for_step(options.seed, step);
      evict_layer(cache, l, budget, sc, plan.decode.protect);  // PrefillDecodingPress: the second press's own set
    }
    PhaseScope timed(*this, EnginePhase::CacheEdit);
    merge_state.evicted(l);
    if (plan.stages.reassign_positions) OriginalPositions::reassign_layer(cache, l);
    ++report.applications;
  }
};

EvictionEngine::EvictionEngine(const PolicyProgram& policy, const ModelConfig& config, EngineOptions options)
    : state_(std::make_unique<State>(policy, config, std::move(options))) {
  state_->reset();
}

EvictionEngine::~EvictionEngine() = default;

ObservationRequest EvictionEngine::request() const {
  ObservationRequest r;
  r.window = state_->query_window();
  // A window that depends on the prompt length is unknown until the prompt arrives: ask for every
  // query of the block (the decoder hands out a view of its query buffer, no copy); the engine
  // keeps only the rows it needs once window_for(prompt_len) is known.
  if (state_->desc.depends_on_prompt_len && !state_->prefill_done) r.window = state_->config.context_length;
  // A segment-local observation needs the last queries of every segment: every query of the prompt
  // is handed over (a view, no copy); SegmentQueries keeps only the observation rows.
  if (state_->desc.observe.segment > 0) r.window = state_->config.context_length;
  r.accumulated_attention = state_->desc.needs(TensorSignal::AccumulatedAttention) ||
                            MergeOnEvictState::needs_decode_attention(state_->desc.merge);
  // A policy that reads no cached row lets a device cache keep the call's rows to itself
  // (cache_row_reads.h). While decoding, A_now then comes from the decoder's column sums
  // (LayerSignals::cache_rows_are_placeholders), so those are asked for.
  r.cache_row_reads = state_->cache_row_reads_by_call();
  if (r.cache_row_reads.next_token != CacheRowReads::Reads && state_->prefill_done &&
      state_->desc.needs(TensorSignal::CurrentAttention)) {
    r.accumulated_attention = true;
    // Scored on the device: the decoder's device copy is read in place, no host copy is needed.
    r.column_sums_on_device_only = state_->current_in_place;
  }
  // Accumulated on the device: every block's sums are added where the decoder left them, unless
  // something on the host reads them (then A_now is not in place either).
  if (state_->accumulated_in_place && !state_->host_reads_column_sums() &&
      (!state_->desc.needs(TensorSignal::CurrentAttention) || state_->current_in_place))
    r.column_sums_on_device_only = true;
  // The prompt query statistics read every prompt query, and a window found from the tokens is
  // unknown until the prompt arrives: both see the whole block (a view, no copy).
  if ((reads_query_statistics(state_->desc) || state_->desc.observe.window_after_token >= 0) && !state_->prefill_done)
    r.window = state_->config.context_length;
  r.hidden_norms = state_->desc.needs(TensorSignal::HiddenNorm);
  r.output_grams = state_->desc.needs(TensorSignal::OutputNorm);
  r.output_projection = state_->desc.needs(TensorSignal::OutputNormL1);
  r.hidden_states = state_->desc.needs(TensorSignal::HiddenState);
  r.row_norms = state_->desc.needs(TensorSignal::KeyNorm) || state_->desc.needs(TensorSignal::ValueNorm);
  r.window_attention = state_->requested_window_attention();
  r.window_attention_causal = state_->desc.observe.causal;
  // While decoding, the rows the engine holds itself: a decoder first asked for the window
  // attention now (NACL's window, found from the prompt's length) starts from them.
  if (r.window_attention > 0 && state_->prefill_done && !state_->in_prefill)
    for (int l = 0; l < state_->L; ++l)
      r.observer_queries.push_back({state_->recent.data(l), state_->recent.rows(l), state_->recent.first_position(l)});
  r.host_rows_not_read_later = state_->host_rows_not_read_later();
  // Scored on the device: K and V are read where the decoder copies them out, in the calls this
  // engine declared NoneGivenDecoderSignals (the others have the rows on the host, or read none).
  r.cache_keys_on_device = state_->rows_in_place && state_->desc.needs(TensorSignal::Keys);
  r.cache_values_on_device = state_->rows_in_place && state_->desc.needs(TensorSignal::Values);
  // Merges run where the rows are (cache_row_reads.h: such a merge reads no host row).
  r.cached_row_merges = merge_given_by_decoder(state_->desc.merge);
  return r;
}

void EvictionEngine::after_layer(const LayerSignals& signals, KVCache& cache) {
  const bool new_prompt = signals.layer == 0 && (!state_->prefill_done || signals.first_position == 0);
  const bool prefill = new_prompt || state_->in_prefill;
  State::EngineCall timed(*state_, /*decoding=*/!prefill);
  if (state_->replay_pending && signals.first_position > 0)
    throw UsageError("policy " + state_->desc.name + " reads A_replay: its prompt must be prefilled by prefill_prompt "
                     "(core/engine/block_prefill.h), which runs the replay before any other forward call");
  // The decoder's window attention is valid during this call only: dropped however it ends.
  struct DropWindow {
    State& st;
    ~DropWindow() {
      st.window_in.drop();
      st.report.window_attention_reused = st.window_in.heads_copied();
      st.report.window_attention_in_place = st.window_in.heads_in_place();
      st.report.window_attention_downloads = st.window_in.downloads();
    }
  } drop_window{*state_};
  // Placeholder rows hold for this call only (the next may have synced them): forgotten however it ends.
  struct Rows {
    bool& placeholders;
    CachedRowMerges*& merges;
    ~Rows() {
      placeholders = false;
      merges = nullptr;
    }
  } rows{state_->placeholder_rows, state_->decoder_merges};
  rows.placeholders = signals.cache_rows_are_placeholders;
  rows.merges = signals.cache_rows_are_placeholders ? signals.cached_row_merges : nullptr;
  // The decoder's device copy of the cached rows, read in place by device scoring: this call only.
  struct DeviceRows {
    State& st;
    ~DeviceRows() {
      st.decoder_rows = {};
      st.decoder_rows_layer = -1;
    }
  } device_rows{*state_};
  if (state_->rows_in_place && signals.cache_rows.on_device) {
    state_->decoder_rows = signals.cache_rows;
    state_->decoder_rows_layer = signals.layer;
  }
  if (prefill) state_->prefill_layer(signals, cache, true);
  else state_->decode_layer(signals, cache);
}

void EvictionEngine::after_forward(int n_tokens, KVCache& cache) {
  (void)n_tokens;
  State::EngineCall timed(*state_, /*decoding=*/!state_->in_prefill);
  if (state_->in_prefill) {
    if (state_->prompt_complete() && !state_->replay_pending) state_->finish_prefill(cache);
    return;
  }
  ++state_->decode_step;
  state_->report.decode_steps = state_->decode_step;
  state_->report.bytes_kept = cache.bytes_in_use();
  for (int l = 0; l < state_->L; ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h) {
      HeadReport& r = state_->report.layers[l][h];
      r.kept = cache.length(l, h);
      if (state_->kept_count_is_output()) r.budget = r.kept;
      const int32_t* pos = state_->positions(cache, l, h);
      r.kept_positions.assign(pos, pos + r.kept);
      std::sort(r.kept_positions.begin(), r.kept_positions.end());
      if (state_->options.trace_selection) state_->copy_trace(l, h, r);
    }
}

int EvictionEngine::prefill_block() const { return state_->plan.prefill.block; }

void EvictionEngine::begin_block_prefill(int prompt_len) {
  if (prompt_len <= 0) throw std::invalid_argument("begin_block_prefill: the prompt must have tokens");
  state_->block_prompt = prompt_len;  // the first block (position 0) starts the prompt as usual
}

void EvictionEngine::apply_after_prefill(const PrefillRecorder& recorded, KVCache& cache) {
  State::EngineCall timed(*state_, /*decoding=*/false);
  State& st = *state_;
  if (static_cast<int>(recorded.layers().size()) != st.L)
    throw std::invalid_argument("apply_after_prefill: the recorder saw " + std::to_string(recorded.layers().size()) +
                                " layers, the model has " + std::to_string(st.L));
  const int S = recorded.first_position() + recorded.n_tokens();
  const int need_window = recorded_window_for(st.policy, S);
  if (st.desc.needs(TensorSignal::HiddenNorm) && !recorded.layers().empty() && recorded.layers()[0].hidden_norms.empty())
    throw std::invalid_argument("apply_after_prefill: the policy needs hidden_norm; the recorder has none");
  if (st.desc.needs(TensorSignal::OutputNorm) && !recorded.layers().empty() && recorded.layers()[0].output_grams.empty())
    throw std::invalid_argument("apply_after_prefill: the policy needs out_norm; the recorder has no output projection");
  if (st.desc.needs(TensorSignal::OutputNormL1) && !recorded.layers().empty() && recorded.layers()[0].output_projection.empty())
    throw std::invalid_argument("apply_after_prefill: the policy needs out_norm_l1; the recorder has no output projection");
  if (st.desc.needs(TensorSignal::HiddenState) && !recorded.layers().empty() && recorded.layers()[0].hidden_states.empty())
    throw std::invalid_argument("apply_after_prefill: the policy needs hidden; the recorder has no hidden states");
  for (int l = 0; l < st.L; ++l) {
    const PrefillRecorder::Layer& rec = recorded.layers()[l];
    const int window = std::min(need_window, recorded.n_tokens());
    if (rec.window < window)
      throw std::invalid_argument("apply_after_prefill: recorded window " + std::to_string(rec.window) +
                                  " is smaller than the policy's " + std::to_string(window));
    if (st.desc.needs(TensorSignal::AccumulatedAttention) && rec.accumulated_attention.empty())
      throw std::invalid_argument("apply_after_prefill: the policy needs accumulated attention; the recorder has none");
    LayerSignals s;
    s.layer = l;
    s.first_position = recorded.first_position();
    s.n_tokens = recorded.n_tokens();
    s.window = window;
    const size_t row = static_cast<size_t>(st.Hq) * st.d;
    s.window_queries = std::span<const float>(rec.window_queries.data() + (rec.window - window) * row, window * row);
    s.accumulated_attention = rec.accumulated_attention.empty() ? nullptr : &rec.accumulated_attention;
    s.tokens = recorded.tokens();
    s.hidden_norms = rec.hidden_norms;
    s.output_grams = rec.output_grams;
    s.output_projection = rec.output_projection;
    s.hidden_states = rec.hidden_states;
    st.prefill_layer(s, cache, /*allow_cascading=*/false);
  }
  if (!st.replay_pending) return st.finish_prefill(cache);
  const ReplayScores* r = st.awaits_replay() ? recorded.replay(replay_options(st.desc.observe.replay)) : nullptr;
  if (!r && st.awaits_replay())
    throw std::invalid_argument("apply_after_prefill: the policy reads A_replay; the recorder has no replay for its "
                                "observe.replay (PrefillRecorder::record_replay)");
  st.complete_replay(r, cache);
}

bool EvictionEngine::awaits_replay() const { return state_->replay_pending; }

const std::vector<float>& EvictionEngine::finish_replay(Decoder& decoder, std::span<const int> prompt,
                                                        const std::vector<float>& logits) {
  State& st = *state_;
  if (!st.replay_pending) throw std::logic_error("finish_replay: no prefill waits for a replay");
  st.replay_logits = logits;  // the replay's forwards overwrite the decoder's logits buffer
  if (!st.awaits_replay()) {
    State::EngineCall timed(st, /*decoding=*/false);
    st.complete_replay(nullptr, decoder.cache());
    return st.replay_logits;
  }
  ReplayScores scores;
  {
    Stopwatch sw(&st.report.replay_seconds);
    scores = run_policy_replay(decoder, prompt, st.desc.observe.replay);
  }
  State::EngineCall timed(st, /*decoding=*/false);
  st.complete_replay(&scores, decoder.cache());
  return st.replay_logits;
}

bool EvictionEngine::observes_decode() const { return state_->desc.run.decode_every > 0; }

const EvictionReport& EvictionEngine::report() const { return state_->report; }

const EvictionPlan& EvictionEngine::plan() const { return state_->plan; }

int recorded_window_for(const PolicyProgram& policy, int prompt_len) {
  const PolicyDescription& d = policy.description();
  // Every segment's last queries, the prompt query statistics and a window found from the tokens
  // need every query of the prompt.
  if (d.observe.segment > 0 || reads_query_statistics(d) || d.observe.window_after_token >= 0) return prompt_len;
  return std::max(policy.window_for(prompt_len), d.needs(TensorSignal::CurrentAttention) ? 1 : 0);
}

std::vector<size_t> EvictionEngine::aligned_state_lengths(int layer, int stored_head) const {
  const State& st = *state_;
  std::vector<size_t> lengths;
  if (layer < 0 || layer >= st.L || stored_head < 0 || stored_head >= st.Hs) return lengths;
  if (!st.scores[layer][stored_head].empty()) lengths.push_back(st.scores[layer][stored_head].size());
  if (st.in_prefill)  // a prompt's scores held in the selector (a decode eviction's buffer is scratch)
    if (const std::vector<int64_t> held = st.selector->score_buffer_lengths(layer); !held.empty())
      lengths.push_back(static_cast<size_t>(held.at(static_cast<size_t>(stored_head))));
  if (st.accumulated_device)
    if (const int64_t n = st.accumulated_device->lengths(layer)[static_cast<size_t>(stored_head)]; n > 0)
      lengths.push_back(static_cast<size_t>(n));
  if (!st.accumulated[layer].empty())
    for (int g = 0; g < st.Gs; ++g)
      if (const auto& a = st.accumulated[layer][stored_head * st.Gs + g]; !a.empty()) lengths.push_back(a.size());
  return lengths;
}

}  // namespace kvevict
