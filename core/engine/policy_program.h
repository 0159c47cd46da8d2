#pragma once
// The contract between a compiled policy (dsl/ builds one from a policy file; tests may write one
// by hand) and the eviction engine (core/engine). A policy supplies numbers: per-token scores and
// per-layer weights. The engine owns every shared mechanism: integer budgets that add up exactly,
// cascading re-allocation, protected sets, top-k and seeded sampling, compaction, the codebook.
#include "core/engine/model_geometry.h"
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/engine/head_budgets.h"
#include "core/engine/policy_modes.h"
#include "core/engine/signals.h"

namespace kvevict {

// When the policy runs.
struct PolicyRun {
  bool at_prefill = true;   // once the prompt is in the cache, layer by layer
  bool cascading = false;   // CAKE: after each layer, re-split the budget over layers seen so far and shrink them all
  int decode_every = 0;     // 0: never while decoding; N: every N decode steps
  int decode_slack = 0;     // while decoding, evict only once a head holds more than budget + slack
  // Added. Prefill eviction is skipped when the prompt length S <= budget (+ window when true):
  // CAKE's code skips for S <= C + W (spec §2.5, §8 `cake.skip_if_prompt_le`).
  bool skip_margin_includes_window = false;
  // Added. Whether the decode-time score reads window_attention (false saves W x T work per step
  // when the decode indicator only uses current_attention, as CAKE's released code does).
  bool decode_uses_window_attention = true;
  // Added. StreamingLLM's official position handling (spec §5.1, §8 `streaming.position_mode`):
  // after every eviction the engine re-assigns each evicted layer's positions to 0..n-1 in cache
  // order (keys re-rotated, KVCache::reassign_positions) and new tokens take position = cache
  // length. false keeps true positions (RoPE as applied when the token entered). Scores, selection
  // and reports still see original positions (the engine tracks them).
  bool reassign_positions = false;
  // Added. A decode-phase budget (policy file `run.decode_budget`, an expression over parameters,
  // prompt_len, decode_step and budget): PolicyProgram::decode_budget_for gives the per-head budget
  // in tokens at each decode trigger (CompressionRatioDecodingPress: a share of the tokens seen;
  // PrefillDecodingPress: its decoding press's own target size). false: the prefill's budgets.
  bool has_decode_budget = false;
  // Added. Chunked prefill (policy file `run.prefill_block`): N > 0 prefills the prompt in blocks of
  // N tokens (prefill_prompt, core/engine/block_prefill.h) and applies the policy after every
  // block, so no head ever holds more than its budget + N entries (BlockPress, KeyDiff's block
  // prompt processing). 0: the prompt in one forward call.
  int prefill_block = 0;
};

// Tokens that are never candidates for eviction; they count inside the budget.
struct PolicyProtect {
  int first = 0;   // the first n positions (attention sinks)
  int recent = 0;  // the last n cached tokens
  // Added. While decoding (policy file `protect.decode_first` / `decode_recent`); -1: as above.
  // PrefillDecodingPress runs two presses, each with its own protected set.
  int decode_first = -1, decode_recent = -1;
};

struct PolicySelect {
  // Share of the free (non-protected) budget drawn at random without replacement from
  // softmax(score / temperature) over the tokens top-k did not take (NACL). 0 disables sampling.
  double random_share = 0.0;
  double temperature = 1.0;
  // KvHead: each KV head keeps its own top-k with its own budget.
  // Layer: Ada-KV; the top (n_kv_heads * budget) scores over all heads of the layer decide each
  // head's budget, floored at floor_alpha * budget.
  // LayerShared: TOVA; one selection per layer on the mean of the KV heads' scores, applied to
  // every head (all heads of the layer then hold the same positions).
  SelectScope scope = SelectScope::KvHead;
  double floor_alpha = 0.0;
  // Order of survivors in the cache: Positional (ascending original position) or Score.
  KeptOrder kept_order = KeptOrder::Positional;
  // Added. How layer_weight is read (policy_modes.h): a share of the budget, or the layer's budget
  // in tokens (select.layer_allocation: tokens; SimLayerKV).
  LayerAllocation layer_allocation = LayerAllocation::Share;
  // Added. What head_weight means: a share of the layer's budget, or the head's count in tokens
  // (select.head_allocation: tokens; LUKV). core/engine/head_budgets.h.
  HeadAllocation head_allocation = HeadAllocation::Share;
  // Added. SpindleKV's "fully unfold GQA" (spec §4.1 option B, §6 rule 3, §8 gqa_mode = unfold):
  // the score program runs per query head (ScoreInputs::group = 1, kv_head = the query head) and
  // each query head keeps its own top-k in its own copy of the KV head's entries; at the end of
  // prefill the cache holds one stored head per query head (KVCache::unfold_keep) and its bytes
  // are reported as stored. Needs scope KvHead and no cascading. false: per KV head (default).
  bool unfold_gqa = false;
  // Added. Chunk-structured selection (core/engine/chunk_selection.h; ChunkKV, ChunkPress). Chunk c
  // of a head holds the entries with original positions c*chunk .. c*chunk + chunk - 1 (the last
  // chunk of the prompt may be shorter). unit Chunk: whole chunks ranked by chunk_score of their
  // candidate entries' scores; quota PerChunk: each chunk keeps its own share of the budget.
  // chunk > 0 is required by both and used by nothing else. Prefill only (no decode triggers, no
  // cascading), no random share, no unfold_gqa, scope kv_head or layer_shared: checked when read.
  SelectUnit unit = SelectUnit::Token;
  int chunk = 0;
  ChunkScore chunk_score = ChunkScore::Mean;
  SelectQuota quota = SelectQuota::Global;
  // Added. unit Chunk only: gate Entropy visits the chunks greedily and keeps at most `rescue`
  // entries of a high-score, low-entropy chunk (chunk_selection.h, select_entropy_gated).
  ChunkGate gate = ChunkGate::None;
  int rescue = 0;
  // Added. Threshold selection (core/engine/threshold_selection.h; kvpress DMSPress): a head keeps
  // its protected entries and the candidates whose score >= threshold, at most its budget (the
  // budget is the cap, so a threshold only evicts more than top-k would). The kept count is an
  // output, recorded as each head's budget in the report.
  bool has_threshold = false;
  double threshold = 0.0;
  // Added. When scores are computed (policy_modes.h): afresh at each application, or frozen at
  // insertion (the engine keeps them aligned with the cache and scores only new entries).
  ScoreAt score_at = ScoreAt::Eviction;
  // Added. Staged selection (kvpress ComposedPress; core/engine/staged_selection.h): at prefill each
  // stage scores what the previous stages left with its own program (0: the file's `score`; i > 0:
  // PolicyProgram::stage_score(i)) and keeps floor(keep x entries) of each head (keep <= 0: the
  // budget), never more than the budget. Empty: one selection with `score`.
  // share > 0 instead (every stage but the last): the stages split the head's free budget, each
  // taking its top share of it among the entries earlier stages did not take, all scored on the
  // same cache; the last takes the rest ("the top share of the budget by one score, the rest by
  // another").
  struct Stage {
    int program = 0;
    double keep = 0.0;
    double share = 0.0;
    // The signals the stage's program reads (the policy file's compiler sets them): a later stage
    // scores a head the earlier ones already reduced, so the engine gathers these alone for it
    // (the window attention handed over covers the head before the cut). Not known: every signal.
    SignalSet reads{};
    bool reads_known = false;
  };
  std::vector<Stage> stages;
  // Added. layer_allocation Mass: the attention mass a layer's budget must reach (0 < mass <= 1).
  double mass = 0.0;
};

// SpindleKV's codebook stage (method Codebook: merge near-duplicate pre-RoPE keys / values), or
// a merge-on-evict rule (core/engine/merge_on_evict.h) applied wherever the engine evicts.
struct PolicyMerge {
  bool enabled = false;
  MergeMethod method = MergeMethod::Codebook;
  // Added. Merge-on-evict methods only: an evicted entry is merged only when the cosine of its key
  // with its most similar surviving key is >= this (kvpress MergingPress similarity_threshold).
  // -1 merges every evicted entry (KVCache-Factory's pivot / weighted have no gate).
  double similarity_threshold = -1.0;
  // Added. Method Cam only: how many of the next kept entries (cache order) each merged evicted
  // value is spread over (kvpress CAMPress merge_budget, default 32).
  int merge_budget = 32;
  // Added. Method D2o only: threshold <- ema_alpha * threshold + ema_beta * (the eviction's mean
  // best cosine) (D2O's alpha and belta, default 0.5 each).
  double ema_alpha = 0.5;
  double ema_beta = 0.5;
  // The fields below are the codebook's (method Codebook only).
  double theta_key = 0.98;
  double theta_value = 0.95;
  // Added. PerHead: one codebook per (layer, stored head). PerLayerAcrossHeads: one per layer
  // shared by all its stored heads (spec §4.2 eq. 15 r2), codes counted once per layer.
  MergeScope scope = MergeScope::PerHead;
  // Added. Layers that get a codebook: first_layer .. last_layer inclusive (last_layer -1 or past
  // the model's last layer: up to the last layer). Other layers stay dense.
  int first_layer = 0;
  int last_layer = -1;
};

// Added. How the window attention A is observed (policy file `observe:`; docs/ENGINE.md "Signals").
struct PolicyObserve {
  // true: a window query at position p sees the entries at positions <= p. false: every window
  // query sees every cache entry (NACL's official proxy scoring, spec §3.5 item 3).
  bool causal = true;
  // false: KV head j is scored by the G query heads of its own group (j*G .. j*G+G-1).
  // true: by query head j alone (A then has one head, ScoreInputs::group = 1), which attends over
  // the keys of its own KV head j / G; the scores are matched to KV head j's entries by position.
  // This reproduces the official NACL code's row mix-up (spec §3.5 item 1); it needs a policy that
  // reads no other per-query-head signal (A_acc, A_now), which the engine checks.
  bool same_index_head = false;
  // Added. Segment length of the segment-local attention A_seg (0: none; core/engine/
  // segment_observation.h). Segment s holds prompt positions s*segment .. s*segment + segment - 1;
  // its observation queries are its own last min(window, length) queries, and each one's softmax
  // runs over the keys of its own segment only (causal unless `causal` is false). Prefill only.
  int segment = 0;
  // Added. false: A_seg's logits are q . k unscaled, as NonCausalAttnPress's official code has them
  // (sm_scale 1); true: q . k / sqrt(head_dim). Read only with segment > 0.
  bool scaled = true;
  // Added. The prompt query statistics Q_mean / Q_cov (core/engine/query_signals.h): mean and
  // covariance (divided by n) of the pre-RoPE queries of prompt positions >= query_stats_from,
  // then rotated by query_rotation; FutureMean uses the mean RoPE rotation over the positions
  // prompt_len .. prompt_len + rope_future - 1 (ExpectedAttention's n_future_positions).
  int query_stats_from = 0;
  QueryRotation query_rotation = QueryRotation::None;
  int rope_future = 512;
  // Added. FinchPress's delimiter (>= 0): the observation window is the prompt tokens after the
  // last occurrence of this token id (the question after the context); -1: `window` as resolved.
  int window_after_token = -1;
  // Added. KVzip's context replay (observe.replay; core/engine/replay_pass.h): after the prefill the
  // engine's caller replays the context once through the decoder and A_replay[h, t] is the largest
  // attention a replay query of head h gives entry t. Defaults are kvpress KVzipPress's.
  struct Replay {
    bool enabled = false;   // the file has observe.replay (required by, and only with, A_replay)
    int chunk = 2048;       // context tokens per replay forward, 1 .. kMaxReplayChunk
    int previous_tail = 8;  // a later chunk's prompt quotes the previous chunk's last tokens, 0 .. chunk
    int n_sink = 4;         // leading entries every chunk's softmax covers (scored 1 before the replay)
    bool normalise = false; // KVzip+'s row factor: probabilities / ||attention input|| of the replay query
    bool operator==(const Replay&) const = default;
  } replay;
};

// Added. Key-channel pruning (policy file `channel_score` + `channels:`; ThinK, kvpress ThinKPress;
// core/engine/channel_selection.h): at the end of prefill each (layer, KV head) zeroes the
// floor(prune x head_dim) key channels of lowest channel_score in its cached entries. Zeroed
// channels are still stored: the cache does not shrink (kvpress does not shrink it either).
struct PolicyChannels {
  bool enabled = false;  // the file has a channel_score program
  double prune = 0.0;    // fraction of key channels zeroed, 0 <= prune < 1 (kvpress default 0)
};

struct PolicyDescription {
  std::string name;
  std::string about;
  std::string source;                 // policy file path
  int window = 0;                     // observation window W (queries whose attention scores tokens); 0: none
  // The tensor signals some program of the policy reads (core/engine/signals.h); the engine
  // produces only those. Window attention is produced whenever window > 0.
  SignalSet reads{};
  bool needs(TensorSignal s) const { return reads[signal_index(s)]; }
  // Reads the norms of cached keys or values (key_norm, value_norm).
  bool needs_row_norms() const { return needs(TensorSignal::KeyNorm) || needs(TensorSignal::ValueNorm); }
  // Added. The signals the decode indicator reads (decode_score, or score without one), when the
  // description knows them (the DSL's compiler does); otherwise `reads` stands for them.
  SignalSet decode_reads{};
  bool decode_reads_known = false;
  // Added. Whether the decode indicator gives each entry a value made from that entry alone
  // (dsl/entry_locality.h; the DSL's compiler knows, a hand-made description says false). With
  // score_at insertion the engine then scores the newest entries alone and records no hidden state
  // past the call that hands it over; otherwise it scores whole heads and keeps the records.
  bool decode_scores_each_entry_alone = false;
  // Added. The signals the programs of the prompt's calls read (score, layer_weight, head_mode,
  // head_weight, the stage programs: everything but decode_score and channel_score, which runs once
  // the prompt is done, over the kept rows), when the description knows them (the DSL's compiler
  // does); otherwise `reads` stands for them.
  SignalSet prompt_reads{};
  bool prompt_reads_known = false;
  // window / protect depend on the prompt length (NACL: fractions of the prompt); the fields
  // below then hold the values for prompt_len = 0 and the engine must call window_for() /
  // protect_for() once the prompt length is known.
  bool depends_on_prompt_len = false;
  // Added. The window itself is one of those (the DSL knows; a hand-made description that sets
  // depends_on_prompt_len is taken to have such a window).
  bool window_depends_on_prompt_len = false;
  bool has_layer_weight = false;      // false: uniform budgets across layers
  bool has_decode_score = false;      // a separate indicator used while decoding
  // Added. head_mode / head_weight programs: the engine asks head_plan() per (layer, KV head) at
  // prefill and splits each layer's budget among its heads (core/engine/head_budgets.h).
  bool has_head_plan = false;
  // Added. The signals the head_mode / head_weight programs read, when the description knows them
  // (the DSL's compiler does). A head plan that reads none (a table per head, T, the layer: HeadKV,
  // LU-KV, DuoAttention, RLKV) is handed its scalars alone, so the policy's scores may read their
  // signals in place on a device (EvictionEngine's in-place scoring).
  SignalSet head_plan_reads{};
  bool head_plan_reads_known = false;
  bool head_plan_reads_signals() const {
    if (!head_plan_reads_known) return has_head_plan;
    for (bool r : head_plan_reads)
      if (r) return true;
    return false;
  }
  PolicyObserve observe;
  PolicyRun run;
  PolicyProtect protect;
  PolicySelect select;
  PolicyMerge merge;
  PolicyChannels channels;
  std::map<std::string, std::string> params;  // resolved parameter values, for the results store
};

// What the score program of one (layer, KV head) may read. Arrays run over the head's cache
// entries t = 0..T-1 in cache order; `group` is the number of query heads G of this KV head (1 with
// PolicyObserve::same_index_head). With PolicySelect::unfold_gqa the program runs per stored head =
// query head: kv_head is the query head, n_kv_heads = n_heads, group = 1.
// A signal's pointer is null when the description did not ask for it. Layouts (row-major, t
// innermost) follow the signal's axes in core/engine/signals.h, e.g.
//   window attention [G][W][T] softmax rows of the last W queries (G = group)
//   accumulated / current attention [G][T];  key / value norms [T] (L2 norm of each row)
struct ScoreInputs {
  int layer = 0, kv_head = 0;
  int n_layers = 0, n_kv_heads = 0, group = 1, head_dim = 0;
  int T = 0;                  // cache length of this head
  int prompt_len = 0;
  int decode_step = 0;        // 0 during prefill
  int n_embd = 0;             // the model dimension: the extent of axis c (hidden[c, t])
  int W = 0;                  // rows of window_attention
  std::array<const float*, kNumTensorSignals> tensor{};  // by TensorSignal; Position's slot stays null
  const int32_t* position = nullptr;             // [T]  original positions (null: the cache slot)
  uint64_t seed = 0;                             // random(): counter-based on (seed, layer, kv_head, position)
  // Bit signal_index(s) set: tensor[s] is memory of the CUDA device the program scores on, in the
  // layout above (the decoder's window attention read in place). Only ever set for a program whose
  // scores_device_signals() is true; every other backend refuses such inputs (std::logic_error).
  uint32_t device_signals = 0;
  // The same positions as `position`, in that device's memory (the decoder's device cache's own:
  // LayerSignals::cached_positions), for such a program to read in place; the host code reads
  // `position`. Null: none there (a device program uploads `position`).
  const int32_t* device_position = nullptr;

  const float* signal(TensorSignal s) const { return tensor[signal_index(s)]; }
  // Whether anything above is device memory (what a host backend must refuse).
  bool has_device_memory() const { return device_signals != 0 || device_position != nullptr; }
  void set_signal(TensorSignal s, const float* data) { tensor[signal_index(s)] = data; }
  void set_device_signal(TensorSignal s, const float* device_data) {
    tensor[signal_index(s)] = device_data;
    device_signals |= 1u << signal_index(s);
  }
  bool on_device(TensorSignal s) const { return (device_signals >> signal_index(s)) & 1u; }
};
static_assert(kNumTensorSignals <= 32, "ScoreInputs::device_signals has one bit per tensor signal");

// `in`'s scalars (layer, head, sizes, seed) without any signal or position: what a program that
// reads none is handed (a head plan of a table per head), whatever memory the signals are in.
inline ScoreInputs scalars_of(const ScoreInputs& in) {
  ScoreInputs out = in;
  out.tensor = {};
  out.position = nullptr;
  out.device_signals = 0;
  out.device_position = nullptr;
  return out;
}

// What a layer_weight program's value means to the allocator: a share of the budget, so a
// negative, infinite or NaN value is "nothing" (0). Every backend reads its value through this.
inline double usable_layer_weight(double w) { return std::isfinite(w) && w > 0 ? w : 0.0; }

// Per-layer statistics for the budget allocator: the score inputs of every KV head of the layer.
struct LayerWeightInputs {
  int layer = 0, n_layers = 0;
  int prompt_len = 0;
  double budget = 0;  // the average budget per (layer, KV head) in tokens, protected tokens included
  std::vector<ScoreInputs> heads;  // one per KV head
};

class PolicyProgram {
 public:
  virtual ~PolicyProgram() = default;
  virtual const PolicyDescription& description() const = 0;
  // Writes one score per cache entry (higher = keep). `decoding` selects the decode indicator when
  // the policy declares one.
  virtual void score(const ScoreInputs& in, bool decoding, float* out) const = 0;
  // Layer weight for the allocator (only called when description().has_layer_weight).
  virtual double layer_weight(const LayerWeightInputs& in) const = 0;
  // Added. Whether layer_weight reads its heads' signals where ScoreInputs::device_signals marks
  // them as device memory (the CUDA backend's generated layer kernel); others refuse such inputs.
  virtual bool layer_weight_takes_device_signals() const { return false; }
  // Observation window and protected sets for a given prompt length (see depends_on_prompt_len).
  virtual int window_for(int prompt_len) const { (void)prompt_len; return description().window; }
  virtual PolicyProtect protect_for(int prompt_len) const { (void)prompt_len; return description().protect; }
  // The per-(layer, KV head) budget in tokens while decoding, when description().run.has_decode_budget:
  // `decode_step` tokens have been appended since the prompt (prompt_len + decode_step = tokens
  // seen) and `budget` is the prefill's per-head budget.
  virtual double decode_budget_for(int prompt_len, int decode_step, double budget) const {
    (void)prompt_len;
    (void)decode_step;
    return budget;
  }
  // Added. Score program `program` of select.stages (0: the file's score program, as score(in,
  // false, out); i > 0: the i-th extra program). A backend without extra programs refuses them.
  virtual void stage_score(int program, const ScoreInputs& in, float* out) const {
    if (program != 0) throw std::logic_error("policy " + description().name + ": this backend has no extra score programs");
    score(in, false, out);
  }
  // Added. Mode and budget weight of one KV head (only called when description().has_head_plan).
  virtual HeadPlan head_plan(const ScoreInputs& in) const { (void)in; return {}; }
  // Added. One score per key channel of one (layer, KV head) (only called when
  // description().channels.enabled): writes in.head_dim values, higher = keep
  // (core/engine/channel_selection.h). `in` holds the score program's signals on the cache as it is
  // at the end of prefill (after the token selection).
  virtual void channel_score(const ScoreInputs& in, float* out) const {
    (void)in, (void)out;
    throw std::logic_error("policy " + description().name + ": this backend has no channel_score program");
  }
  // Added. Where the engine should run this program's token selection: where its scores are made
  // (the CUDA scoring backend: on the device). EngineOptions::selection overrides it.
  virtual SelectionDevice selection_device() const { return SelectionDevice::Host; }
  // Added. Whether score() takes signals in device memory (ScoreInputs::device_signals): the CUDA
  // scoring backend, whose kernels then read them in place instead of uploading host copies.
  virtual bool scores_device_signals() const { return false; }
  // Added. The CUDA device whose memory those signals must be (the device the program's kernels
  // run on); -1 for a program that runs on none. The engine refuses a decoder's device signals
  // from another device (LayerSignals::cuda_device).
  virtual int cuda_device() const { return -1; }
  // Added. Whether score_on_device() writes the scores into device memory (the CUDA scoring
  // backend), so that a selection on that device reads them where they are (LayerSelector::
  // layer_score_buffer): no download of the scores, no upload for the selection.
  virtual bool scores_to_device() const { return false; }
  // score() with `device_out` (T floats) in memory of the program's device; asynchronous where the
  // device is (ordered before later work on its default stream). Only when scores_to_device().
  virtual void score_on_device(const ScoreInputs& in, bool decoding, float* device_out) const {
    (void)in, (void)decoding, (void)device_out;
    throw std::logic_error("policy " + description().name + ": this backend does not score into device memory");
  }
  // Added. "" when the policy fits the model; else why not (e.g. a table of another shape). The
  // engine calls it once, before anything runs, and refuses the policy with the message.
  virtual std::string check_geometry(const ModelGeometry& model) const {
    (void)model;
    return "";
  }
};

}  // namespace kvevict
