#pragma once
// Device-side selection for one layer (issue 10): host planning and the CPU twin.
//
// Contract (both the CUDA launchers, core/engine/cuda/device_selection.h, and the twin here):
//   * select_heads: per stored head, exactly select_head's kept cache indices (selection.h) in its
//     kept order, for the HeadSelectionSpec the head's HeadParams were planned from.
//   * select_layer_adaptive: exactly select_layer_adaptive's lists. The joint ranking and the
//     per-head steps run on the device; the floor_alpha blend and the largest-remainder rounding
//     (allocate_budgets) run on the host from the per-head counts (adaptive_shares).
//   * Positions within one head must be distinct (true of every cache: original positions, or
//     cache indices once re-assigned); with duplicates the counts are still exact but which of two
//     entries with the same score and position is kept is unspecified, as on the CPU.
//   * Exactness: every ranking compares 64/96-bit integer keys that encode the tie rule
//     (device_selection_elements.h) with an exact radix select and a stable radix sort, so no
//     "up to ties" slack. The one floating-point step, NACL's Gumbel key, is the CPU's expression;
//     on the GPU its log may differ from glibc's by an ulp (see gumbel_value).
// Algorithm per head (one block): flag sinks and (radix select on position) the recent window;
// truncate the protected set to the budget by priority; radix-select the top n_top candidates on
// (score, position) keys; compute Gumbel keys of the rest and radix-select n_random of them; then
// compact each kept group in cache order and radix-sort it into its kept order.
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/cached_positions_signal.h"
#include "core/decode/device_kv_view.h"
#include "core/engine/device_selection_head.h"
#include "core/engine/selection.h"

namespace kvevict {

// HeadParams for select_head's rule; throws UsageError on a negative budget or protection,
// a random share outside [0, 1], or (with a random share) a temperature that is not finite > 0.
devsel::HeadParams device_head_params(const HeadSelectionSpec& spec);
// ... for each head of a layer, in order.
std::vector<devsel::HeadParams> device_head_params(const std::vector<HeadSelectionSpec>& specs);

// Validates a layer input (head count <= devsel::kSelMaxHeads, 0 <= length <= max_length,
// n_heads * max_length < 2^31, non-null rows where a length is > 0); throws UsageError.
void check_selection_input(const devsel::SelLayerInput& in);
// Bytes of scratch select_heads / select_layer_adaptive need for `in` (after check_selection_input).
int64_t selection_workspace_bytes(const devsel::SelLayerInput& in);

// The input of a DeviceKvLayerView's layer: positions from the view's arena rows, scores dense
// ([n_heads][score_stride]) at `scores`. max_length = the longest head.
devsel::SelLayerInput selection_input(const DeviceKvLayerView& view, const float* scores, int64_t score_stride);

// The input of a layer whose scores were written packed at `scores` (head h at
// layer_score_offset, layer_selector.h: lengths from `positions`), its positions packed the same
// way into `packed_positions` (host memory, pointed at: repoint for a device copy). UsageError as
// check_selection_input.
devsel::SelLayerInput buffered_selection_input(const float* scores, const std::vector<std::span<const int32_t>>& positions,
                                               std::vector<int32_t>& packed_positions);

// The same input with the positions read where `held` describes them (a decoder's device cache,
// LayerSignals::cached_positions: the selector's memory), head h's at held.data + held.start[h],
// instead of packed from host spans: nothing packed, nothing to upload. `lengths`: the heads'
// lengths (the score buffer's layout). std::logic_error unless `held` describes exactly those heads
// at those lengths; UsageError as check_selection_input.
devsel::SelLayerInput held_selection_input(const float* scores, std::span<const int64_t> lengths,
                                           const CachedPositionsSignal& held);

// Host rows packed as [n_heads][max_length] (what the tests and the benchmark upload).
struct PackedSelectionLayer {
  std::vector<float> scores;
  std::vector<int32_t> positions;
  devsel::SelLayerInput input;  // pointing into the vectors above (re-point after copying)
};
PackedSelectionLayer pack_selection_layer(const std::vector<std::span<const float>>& scores,
                                          const std::vector<std::span<const int32_t>>& positions);
// `in` with its rows re-pointed at scores / positions and the same offsets and lengths.
devsel::SelLayerInput repoint(devsel::SelLayerInput in, const float* scores, const int32_t* positions);

// Ada-KV: the per-head HeadParams of the protection stage (budget[h], no random share); throws
// UsageError on a negative budget or protection or a floor_alpha outside [0, 1].
std::vector<devsel::HeadParams> adaptive_head_params(const std::vector<int>& budget, int protect_first,
                                                     int protect_recent, double floor_alpha, bool score_order);
// Ada-KV's host step: each head's top-k count from the joint counts and free budgets (weights
// n_h (1 - floor_alpha) + floor_alpha free_h, largest remainder, capped at the candidates).
std::vector<int64_t> adaptive_shares(const std::vector<devsel::HeadState>& states, double floor_alpha);

// The order in which the twin runs the threads of a phase. The results must not depend on it
// (a GPU runs them in any order); the tests run the other orders to check that.
enum class TwinThreadOrder { Ascending, Descending, Interleaved };

// The twin: the device algorithm on host memory over an emulated block per head. `params` has
// one entry per head. Returns the kept lists.
std::vector<std::vector<int>> twin_select_heads(const devsel::SelLayerInput& in,
                                                const std::vector<devsel::HeadParams>& params,
                                                TwinThreadOrder order = TwinThreadOrder::Ascending);
std::vector<std::vector<int>> twin_select_layer_adaptive(const devsel::SelLayerInput& in,
                                                         const std::vector<int>& budget, int protect_first,
                                                         int protect_recent, double floor_alpha, bool score_order,
                                                         TwinThreadOrder order = TwinThreadOrder::Ascending);

}  // namespace kvevict
