#include "core/engine/device_selection_twin.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/engine/budget_allocator.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

using devsel::HeadParams;
using devsel::HeadState;
using devsel::SelLayerInput;

[[noreturn]] void bad(const std::string& what) { throw UsageError("device selection: " + what); }

// The twin's block: a phase runs every thread's body in turn (the kernel's barrier is implicit).
struct TwinExec {
  TwinThreadOrder order = TwinThreadOrder::Ascending;
  template <class F>
  void phase(F&& f) {
    constexpr int n = devsel::kSelThreads;
    for (int j = 0; j < n; ++j) {
      // Interleaved: odd threads first, then even ones (a stride-2 permutation).
      const int t = order == TwinThreadOrder::Ascending    ? j
                    : order == TwinThreadOrder::Descending ? n - 1 - j
                                                           : (j < n / 2 ? 2 * j + 1 : 2 * (j - n / 2));
      f(t);
    }
  }
};

// Host scratch and output for one layer, laid out as on the device.
struct TwinBuffers {
  std::vector<uint64_t> workspace;  // uint64 so that the doubles inside are aligned
  std::vector<int32_t> kept, kept_count;
  devsel::SelWorkspace ws;
  devsel::SelOutput out;

  explicit TwinBuffers(const SelLayerInput& in) {
    const int64_t bytes = selection_workspace_bytes(in);
    workspace.assign(static_cast<size_t>(bytes / 8 + 1), 0);
    kept.assign(static_cast<size_t>(std::max(1, in.n_heads)) * std::max<int64_t>(1, in.max_length), 0);
    kept_count.assign(static_cast<size_t>(std::max(1, in.n_heads)), 0);
    ws.base = reinterpret_cast<unsigned char*>(workspace.data());
    ws.head_bytes = devsel::sel_head_bytes(in.max_length);
    out.kept = kept.data();
    out.kept_stride = std::max<int64_t>(1, in.max_length);
    out.kept_count = kept_count.data();
  }
  std::vector<std::vector<int>> lists(int n_heads) const {
    std::vector<std::vector<int>> r(static_cast<size_t>(n_heads));
    for (int h = 0; h < n_heads; ++h) {
      const int32_t* p = kept.data() + h * out.kept_stride;
      r[static_cast<size_t>(h)].assign(p, p + kept_count[static_cast<size_t>(h)]);
    }
    return r;
  }
};

void check_protection(int protect_first, int protect_recent) {
  if (protect_first < 0 || protect_recent < 0) bad("protect_first and protect_recent must be >= 0");
}

}  // namespace

HeadParams device_head_params(const HeadSelectionSpec& spec) {
  if (spec.budget < 0) bad("budget must be >= 0, got " + std::to_string(spec.budget));
  check_protection(spec.protect_first, spec.protect_recent);
  if (!(spec.random_share >= 0.0 && spec.random_share <= 1.0)) bad("random_share must be in [0, 1]");
  if (spec.random_share > 0 && !(spec.temperature > 0 && std::isfinite(spec.temperature)))
    bad("temperature must be finite and > 0");
  HeadParams hp;
  hp.budget = spec.budget;
  hp.protect_first = spec.protect_first;
  hp.protect_recent = spec.protect_recent;
  hp.random_share = spec.random_share;
  hp.temperature = spec.temperature;
  hp.seed = spec.seed;
  hp.layer = spec.layer;
  hp.kv_head = spec.kv_head;
  hp.score_order = spec.score_order ? 1 : 0;
  return hp;
}

std::vector<HeadParams> device_head_params(const std::vector<HeadSelectionSpec>& specs) {
  std::vector<HeadParams> params;
  params.reserve(specs.size());
  for (const HeadSelectionSpec& spec : specs) params.push_back(device_head_params(spec));
  return params;
}

void check_selection_input(const SelLayerInput& in) {
  if (in.n_heads < 0 || in.n_heads > devsel::kSelMaxHeads)
    bad("n_heads must be in [0, " + std::to_string(devsel::kSelMaxHeads) + "], got " + std::to_string(in.n_heads));
  if (in.max_length < 0) bad("max_length must be >= 0");
  // Counts are 32-bit and the joint stage indexes heads * max_length entries.
  if (static_cast<int64_t>(in.n_heads) * in.max_length >= (int64_t{1} << 31))
    bad("n_heads * max_length must be < 2^31, got " + std::to_string(int64_t{in.n_heads} * in.max_length));
  for (int h = 0; h < in.n_heads; ++h) {
    if (in.length[h] < 0 || in.length[h] > in.max_length)
      bad("head " + std::to_string(h) + " length " + std::to_string(in.length[h]) + " outside [0, max_length]");
    if (in.length[h] > 0 && (in.scores == nullptr || in.positions == nullptr)) bad("null scores or positions");
  }
}

// The layout both inputs of a layer's score buffer share: heads of `lengths` entries, their scores
// packed one after another at `scores` (layer_score_offset); positions left to the caller.
static SelLayerInput packed_scores_input(const float* scores, std::span<const int64_t> lengths) {
  if (lengths.size() > static_cast<size_t>(devsel::kSelMaxHeads)) bad("too many heads");
  SelLayerInput in;
  in.n_heads = static_cast<int>(lengths.size());
  int64_t offset = 0, longest = 0;
  for (int h = 0; h < in.n_heads; ++h) {
    if (lengths[h] > std::numeric_limits<int32_t>::max()) bad("head length overflows int32");
    in.score_offset[h] = offset;
    in.length[h] = static_cast<int32_t>(lengths[h]);
    offset += lengths[h];
    longest = std::max(longest, lengths[h]);
  }
  in.max_length = static_cast<int32_t>(longest);
  in.scores = scores;
  return in;
}

SelLayerInput buffered_selection_input(const float* scores, const std::vector<std::span<const int32_t>>& positions,
                                       std::vector<int32_t>& packed_positions) {
  std::vector<int64_t> lengths;
  for (const std::span<const int32_t>& p : positions) lengths.push_back(static_cast<int64_t>(p.size()));
  SelLayerInput in = packed_scores_input(scores, lengths);
  packed_positions.clear();
  for (int h = 0; h < in.n_heads; ++h) {  // packed as the scores are
    in.position_offset[h] = in.score_offset[h];
    packed_positions.insert(packed_positions.end(), positions[h].begin(), positions[h].end());
  }
  in.positions = packed_positions.data();
  check_selection_input(in);
  return in;
}

SelLayerInput held_selection_input(const float* scores, std::span<const int64_t> lengths,
                                   const CachedPositionsSignal& held) {
  if (held.empty() || held.length.size() != lengths.size() || held.start.size() != lengths.size() ||
      !std::equal(lengths.begin(), lengths.end(), held.length.begin()) ||
      std::any_of(held.start.begin(), held.start.end(), [](int64_t start) { return start < 0; }))
    throw std::logic_error("device selection: the positions held on the device do not describe the selected heads");
  SelLayerInput in = packed_scores_input(scores, lengths);
  for (int h = 0; h < in.n_heads; ++h) in.position_offset[h] = held.start[static_cast<size_t>(h)];
  in.positions = held.data;
  check_selection_input(in);
  return in;
}

int64_t selection_workspace_bytes(const SelLayerInput& in) {
  return std::max(1, in.n_heads) * devsel::sel_head_bytes(in.max_length);
}

SelLayerInput selection_input(const DeviceKvLayerView& view, const float* scores, int64_t score_stride) {
  SelLayerInput in;
  if (view.n_heads < 0 || view.n_heads > devsel::kSelMaxHeads) bad("view has too many heads");
  in.scores = scores;
  in.positions = view.positions;
  in.n_heads = view.n_heads;
  int64_t longest = 0;
  for (int h = 0; h < view.n_heads; ++h) {
    if (view.length[h] > std::numeric_limits<int32_t>::max()) bad("head length overflows int32");
    if (view.length[h] > score_stride) bad("score_stride shorter than a head's length");
    in.score_offset[h] = h * score_stride;
    in.position_offset[h] = view.base_row[h];
    in.length[h] = static_cast<int32_t>(view.length[h]);
    longest = std::max(longest, view.length[h]);
  }
  in.max_length = static_cast<int32_t>(longest);
  check_selection_input(in);
  return in;
}

PackedSelectionLayer pack_selection_layer(const std::vector<std::span<const float>>& scores,
                                          const std::vector<std::span<const int32_t>>& positions) {
  if (scores.size() != positions.size()) bad("scores and positions differ in head count");
  if (scores.size() > static_cast<size_t>(devsel::kSelMaxHeads)) bad("too many heads");
  const int H = static_cast<int>(scores.size());
  size_t longest = 0;
  for (int h = 0; h < H; ++h) {
    if (scores[h].size() != positions[h].size()) bad("scores and positions differ in length");
    longest = std::max(longest, scores[h].size());
  }
  if (longest > static_cast<size_t>(std::numeric_limits<int32_t>::max())) bad("head length overflows int32");
  PackedSelectionLayer p;
  const int64_t L = static_cast<int64_t>(longest);
  p.scores.assign(static_cast<size_t>(std::max<int64_t>(1, H * L)), 0.0f);
  p.positions.assign(p.scores.size(), 0);
  p.input.n_heads = H;
  p.input.max_length = static_cast<int32_t>(L);
  for (int h = 0; h < H; ++h) {
    std::copy(scores[h].begin(), scores[h].end(), p.scores.begin() + h * L);
    std::copy(positions[h].begin(), positions[h].end(), p.positions.begin() + h * L);
    p.input.score_offset[h] = p.input.position_offset[h] = h * L;
    p.input.length[h] = static_cast<int32_t>(scores[h].size());
  }
  p.input = repoint(p.input, p.scores.data(), p.positions.data());
  check_selection_input(p.input);
  return p;
}

SelLayerInput repoint(SelLayerInput in, const float* scores, const int32_t* positions) {
  in.scores = scores;
  in.positions = positions;
  return in;
}

std::vector<HeadParams> adaptive_head_params(const std::vector<int>& budget, int protect_first, int protect_recent,
                                             double floor_alpha, bool score_order) {
  check_protection(protect_first, protect_recent);
  if (!(floor_alpha >= 0.0 && floor_alpha <= 1.0)) bad("floor_alpha must be in [0, 1]");
  std::vector<HeadParams> params(budget.size());
  for (size_t h = 0; h < budget.size(); ++h) {
    if (budget[h] < 0) bad("budget of head " + std::to_string(h) + " must be >= 0");
    params[h].budget = budget[h];
    params[h].protect_first = protect_first;
    params[h].protect_recent = protect_recent;
    params[h].score_order = score_order ? 1 : 0;
  }
  return params;
}

std::vector<int64_t> adaptive_shares(const std::vector<HeadState>& states, double floor_alpha) {
  // The same arithmetic as select_layer_adaptive (selection.cpp), so the rounding is identical.
  std::vector<double> weight(states.size());
  std::vector<int64_t> cap(states.size());
  int64_t total_free = 0;
  for (size_t h = 0; h < states.size(); ++h) {
    weight[h] = static_cast<double>(states[h].ada_count) * (1.0 - floor_alpha) + floor_alpha * states[h].ada_free;
    cap[h] = states[h].n_candidates;
    total_free += states[h].ada_free;
  }
  return allocate_budgets(weight, cap, total_free);
}

std::vector<std::vector<int>> twin_select_heads(const SelLayerInput& in, const std::vector<HeadParams>& params,
                                                TwinThreadOrder order) {
  check_selection_input(in);
  if (params.size() != static_cast<size_t>(in.n_heads)) bad("one HeadParams per head expected");
  TwinBuffers buf(in);
  TwinExec ex{order};
  devsel::SelShared sh{};
  for (int h = 0; h < in.n_heads; ++h)
    devsel::select_head_block(ex, sh, devsel::head_io(in, buf.ws, buf.out, h), params[static_cast<size_t>(h)]);
  return buf.lists(in.n_heads);
}

std::vector<std::vector<int>> twin_select_layer_adaptive(const SelLayerInput& in, const std::vector<int>& budget,
                                                         int protect_first, int protect_recent, double floor_alpha,
                                                         bool score_order, TwinThreadOrder order) {
  check_selection_input(in);
  if (budget.size() != static_cast<size_t>(in.n_heads)) bad("one budget per head expected");
  std::vector<HeadParams> params =
      adaptive_head_params(budget, protect_first, protect_recent, floor_alpha, score_order);
  TwinBuffers buf(in);
  TwinExec ex{order};
  devsel::SelShared sh{};
  std::vector<HeadState> states(static_cast<size_t>(in.n_heads));
  for (int h = 0; h < in.n_heads; ++h)
    devsel::stage_protect(ex, sh, devsel::head_io(in, buf.ws, buf.out, h), params[static_cast<size_t>(h)]);
  devsel::stage_joint(ex, sh, in, buf.ws, buf.out);
  for (int h = 0; h < in.n_heads; ++h) states[static_cast<size_t>(h)] = *devsel::head_io(in, buf.ws, buf.out, h).state;
  const std::vector<int64_t> share = adaptive_shares(states, floor_alpha);
  for (int h = 0; h < in.n_heads; ++h) {
    params[static_cast<size_t>(h)].ada_top = share[static_cast<size_t>(h)];
    devsel::select_head_block(ex, sh, devsel::head_io(in, buf.ws, buf.out, h), params[static_cast<size_t>(h)]);
  }
  return buf.lists(in.n_heads);
}

}  // namespace kvevict
