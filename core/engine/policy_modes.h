#pragma once
// The enumerated modes of a policy file and their spellings. A mode is parsed once, where the
// policy file is read (dsl/policy_file_compiler.h, whose choice() lists kModeNames<...> as the allowed values),
// and is an enum everywhere after: the engine never compares strings.
#include <array>
#include <cstdint>
#include <string_view>

namespace kvevict {

// select.scope: who competes for the budget.
enum class SelectScope : uint8_t {
  KvHead,       // "kv_head": each KV head keeps its own top-k with its own budget
  Layer,        // "layer": Ada-KV, one top-k over all heads of the layer decides each head's budget
  LayerShared,  // "layer_shared": TOVA, one selection per layer on the mean of the heads' scores
  // "model": one top-k over the scores of every (layer, KV head) of the model, decided once after
  // the last layer is prefilled (core/engine/model_selection.h); each head's kept count is an output
  Model,
};
// select.score_at: when an entry's score is computed. Eviction: afresh at every application (the
// default). Insertion: once, when the entry enters the cache (prompt entries at prefill, a decoded
// entry at its own step), then frozen and kept aligned with the cache (kvpress DMSPress).
enum class ScoreAt : uint8_t { Eviction, Insertion };
// select.kept_order: order of the survivors in the cache.
enum class KeptOrder : uint8_t { Positional, Score };
// merge.scope: one codebook per stored head, or one per layer shared by its stored heads.
enum class MergeScope : uint8_t { PerHead, PerLayerAcrossHeads };
// merge.method: what the merge: section does (core/engine/merge_on_evict.h for the three
// merge-on-evict rules). Codebook is the default, so a file without the key keeps its meaning.
//   Codebook: SpindleKV's codebook stage at the end of prefill (codebook_stage.h)
//   Nearest:  kvpress MergingPress, evicted values folded into the most key-similar survivor
//   Pivot:    LOOK-M / KVCache-Factory merge "pivot", evicted K and V averaged into that survivor
//   Weighted: KVMerger-style / KVCache-Factory merge "weighted", similarity-weighted scatter
//   Cam:      kvpress CAMPress (CaM), evicted values spread over the next merge_budget survivors,
//             each merge gated by a Bernoulli draw on the attention ratio (merge_cam.h)
//   D2o:      D2O, similarity-weighted averaging into the most key-similar survivor, gated by an
//             EMA threshold of the layer's similarities (merge_on_evict_layer)
enum class MergeMethod : uint8_t { Codebook, Nearest, Pivot, Weighted, Cam, D2o };
// select.unit: what is kept or evicted as one piece (core/engine/chunk_selection.h). Token: each
// entry on its own. Chunk: whole chunks of select.chunk consecutive prompt positions (ChunkKV).
enum class SelectUnit : uint8_t { Token, Chunk };
// select.chunk_score: how the scores of a chunk's entries make the chunk's score (unit chunk).
enum class ChunkScore : uint8_t { Mean, Sum, Max };
// select.quota: Global, one top-k over the head's candidates; PerChunk, every chunk of select.chunk
// positions keeps its own share of the budget, in proportion to its length (ChunkPress).
enum class SelectQuota : uint8_t { Global, PerChunk };
// select.gate (unit chunk): None keeps or drops whole chunks; Entropy (EntropyGatedChunkKV) cuts
// important but spiky chunks to their top select.rescue entries and fills the budget exactly.
enum class ChunkGate : uint8_t { None, Entropy };

// select.head_allocation: what a head_weight means (core/engine/head_budgets.h). Share: the head's
// share of its layer's budget (split exactly). Tokens: the head's own keep count in tokens, a real
// number, rounded per layer as LUKVPress rounds its curve (round_head_counts); --budget does not
// enter (only --budget full turns eviction off).
enum class HeadAllocation : uint8_t { Share, Tokens };
// select.layer_allocation: what a layer_weight means. Share: the layer's share of the model's
// budget (the allocator splits the total exactly). Tokens: the layer's own per-head budget in
// tokens, a data-dependent budget whose kept count is an output (SimLayerKV: a lazy layer keeps
// only its protected tokens, the others everything), capped by --budget and floored at the
// protected count.
// Mass: each layer's per-head budget is the fewest entries whose scores, sorted and normalised to
// sum 1 over the head's candidates, reach the mass select.mass (the mean over the layer's heads,
// rounded up; core/engine/mass_budget.h), plus the protected count, capped like Tokens.
enum class LayerAllocation : uint8_t { Share, Tokens, Mass };
// observe.query_rotation: how the prompt query statistics Q_mean / Q_cov are rotated
// (core/engine/query_signals.h). None: pre-RoPE as accumulated. FutureMean (ExpectedAttention):
// by the mean RoPE rotation over the next observe.rope_future positions after the prompt.
enum class QueryRotation : uint8_t { None, FutureMean };
// Where the engine runs its token selection (core/engine/layer_selector.h): select_head on the
// host, the device algorithm's CPU twin (tests), or the CUDA kernels.
enum class SelectionDevice : uint8_t { Host, Twin, Cuda };

template <class Mode> struct ModeNames;
template <> struct ModeNames<SelectScope> {
  static constexpr std::array<std::string_view, 4> names = {"kv_head", "layer", "layer_shared", "model"};
};
template <> struct ModeNames<ScoreAt> {
  static constexpr std::array<std::string_view, 2> names = {"eviction", "insertion"};
};
static_assert(ModeNames<ScoreAt>::names.size() == static_cast<size_t>(ScoreAt::Insertion) + 1);
template <> struct ModeNames<KeptOrder> {
  static constexpr std::array<std::string_view, 2> names = {"positional", "score"};
};
template <> struct ModeNames<LayerAllocation> {
  static constexpr std::array<std::string_view, 3> names = {"share", "tokens", "mass"};
};
static_assert(ModeNames<LayerAllocation>::names.size() == static_cast<size_t>(LayerAllocation::Mass) + 1);
template <> struct ModeNames<HeadAllocation> {
  static constexpr std::array<std::string_view, 2> names = {"share", "tokens"};
};
static_assert(ModeNames<HeadAllocation>::names.size() == static_cast<size_t>(HeadAllocation::Tokens) + 1);
template <> struct ModeNames<QueryRotation> {
  static constexpr std::array<std::string_view, 2> names = {"none", "future_mean"};
};
static_assert(ModeNames<QueryRotation>::names.size() == static_cast<size_t>(QueryRotation::FutureMean) + 1);
template <> struct ModeNames<SelectionDevice> {
  static constexpr std::array<std::string_view, 3> names = {"host", "twin", "cuda"};
};
static_assert(ModeNames<SelectionDevice>::names.size() == static_cast<size_t>(SelectionDevice::Cuda) + 1);
template <> struct ModeNames<MergeScope> {
  static constexpr std::array<std::string_view, 2> names = {"per_head", "per_layer_across_heads"};
};
template <> struct ModeNames<MergeMethod> {
  static constexpr std::array<std::string_view, 6> names = {"codebook", "nearest", "pivot", "weighted", "cam", "d2o"};
};
template <> struct ModeNames<SelectUnit> {
  static constexpr std::array<std::string_view, 2> names = {"token", "chunk"};
};
template <> struct ModeNames<ChunkScore> {
  static constexpr std::array<std::string_view, 3> names = {"mean", "sum", "max"};
};
template <> struct ModeNames<SelectQuota> {
  static constexpr std::array<std::string_view, 2> names = {"global", "per_chunk"};
};
template <> struct ModeNames<ChunkGate> {
  static constexpr std::array<std::string_view, 2> names = {"none", "entropy"};
};
static_assert(ModeNames<ChunkGate>::names.size() == static_cast<size_t>(ChunkGate::Entropy) + 1);
static_assert(ModeNames<SelectUnit>::names.size() == static_cast<size_t>(SelectUnit::Chunk) + 1);
static_assert(ModeNames<ChunkScore>::names.size() == static_cast<size_t>(ChunkScore::Max) + 1);
static_assert(ModeNames<SelectQuota>::names.size() == static_cast<size_t>(SelectQuota::PerChunk) + 1);
static_assert(ModeNames<SelectScope>::names.size() == static_cast<size_t>(SelectScope::Model) + 1);
static_assert(ModeNames<KeptOrder>::names.size() == static_cast<size_t>(KeptOrder::Score) + 1);
static_assert(ModeNames<MergeScope>::names.size() == static_cast<size_t>(MergeScope::PerLayerAcrossHeads) + 1);
static_assert(ModeNames<MergeMethod>::names.size() == static_cast<size_t>(MergeMethod::D2o) + 1);

template <class Mode> constexpr std::string_view mode_name(Mode m) {
  const auto i = static_cast<size_t>(m);
  return i < ModeNames<Mode>::names.size() ? ModeNames<Mode>::names[i] : std::string_view("?");
}

// The mode spelled `text`; false when it is none of them.
template <class Mode> constexpr bool parse_mode(std::string_view text, Mode& out) {
  for (size_t i = 0; i < ModeNames<Mode>::names.size(); ++i)
    if (ModeNames<Mode>::names[i] == text) {
      out = static_cast<Mode>(i);
      return true;
    }
  return false;
}

}  // namespace kvevict
