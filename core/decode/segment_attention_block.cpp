#include "core/decode/segment_attention_block.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/window_attention_tiles.h"
#include "core/decode/window_attention_twin.h"
#include "core/engine/segment_observation.h"

namespace kvevict {

namespace {

void check_request(const SegmentAttentionRequest& request, int n) {
  if (!request.enabled())
    throw std::invalid_argument("segment attention: segment " + std::to_string(request.segment) + ", window " +
                                std::to_string(request.window) + " (both must be >= 1)");
  if (n < 1) throw std::invalid_argument("segment attention: a prompt of " + std::to_string(n) + " positions");
}

}  // namespace

BlockSegmentAttention block_segment_attention(const SegmentAttentionRequest& request, const float* queries, int n,
                                              const KVCache& cache, int layer, int n_heads) {
  check_request(request, n);
  const int n_kv = cache.n_kv_heads(), d = cache.head_dim();
  if (cache.unfolded() || n_heads % n_kv != 0)
    throw std::invalid_argument("segment attention: " + std::to_string(n_heads) + " query heads over " +
                                std::to_string(n_kv) + " KV heads" + (cache.unfolded() ? ", unfolded" : ""));
  const int group = n_heads / n_kv;
  for (int h = 0; h < n_kv; ++h) {
    bool prompt = cache.length(layer, h) == n;
    for (int t = 0; prompt && t < n; ++t) prompt = cache.positions(layer, h)[t] == t;
    if (!prompt)
      throw std::invalid_argument("segment attention: layer " + std::to_string(layer) + " KV head " +
                                  std::to_string(h) + " does not hold exactly the prompt's positions 0 .. " +
                                  std::to_string(n - 1));
  }
  SegmentQueries observation;
  observation.reset(1, request.segment, request.window, n, static_cast<size_t>(n_heads) * d);
  observation.record(0, queries, n, 0);
  BlockSegmentAttention out{n_heads, n, std::vector<float>(static_cast<size_t>(n_heads) * n)};
  std::vector<float> scratch, head(static_cast<size_t>(group) * n);
  for (int kv = 0; kv < n_kv; ++kv) {
    const float* keys = cache.keys_or_reconstruct(layer, kv, scratch);
    observation.attention(0, kv, group, n_heads, keys, cache.positions(layer, kv), n, d, request.causal,
                          request.scaled, head.data());
    // Entry t is at position t (checked above): the rows are already in position order.
    std::copy(head.begin(), head.end(), out.values.begin() + static_cast<size_t>(kv) * group * n);
  }
  return out;
}

std::vector<SegmentPiece> plan_segment_attention(const SegmentAttentionRequest& request, int n, int n_heads,
                                                 size_t max_piece_floats) {
  check_request(request, n);
  if (n_heads < 1) throw std::invalid_argument("segment attention: " + std::to_string(n_heads) + " query heads");
  std::vector<SegmentPiece> pieces;
  for (int64_t first = 0; first < n; first += request.segment) {
    const int length = static_cast<int>(std::min<int64_t>(request.segment, n - first));
    const int observed = std::min(request.window, length);
    const size_t per_row = static_cast<size_t>(n_heads) * static_cast<size_t>(length);
    const int rows = static_cast<int>(std::clamp<size_t>(max_piece_floats / per_row, 1, static_cast<size_t>(observed)));
    const int segment_first = static_cast<int>(first);
    for (int row = segment_first + length - observed; row < segment_first + length; row += rows)
      pieces.push_back({segment_first, length, row, std::min(rows, segment_first + length - row)});
  }
  return pieces;
}

DeviceKvLayerView segment_view(const DeviceKvLayerView& view, const SegmentPiece& piece) {
  DeviceKvLayerView v = view;
  for (int h = 0; h < v.n_heads; ++h) {
    v.base_row[h] += piece.segment_first;
    v.length[h] = piece.segment_length;
  }
  return v;
}

bool segment_attention_applies(const DeviceKvLayerView& view, int n) {
  if (n < 1 || view.n_heads < 1 || view.n_heads > kDeviceKvMaxHeads || !view.positions) return false;
  if (view.head_dim < 1 || view.head_dim > kWindowMaxHeadDim) return false;
  for (int h = 0; h < view.n_heads; ++h)
    if (view.length[h] != n) return false;
  return true;
}

BlockSegmentAttention segment_attention_twin(const DeviceKvLayerView& view, int group, const float* queries, int n,
                                             const SegmentAttentionRequest& request, size_t max_piece_floats) {
  const int n_heads = view.n_heads * group;
  if (!segment_attention_applies(view, n))
    throw std::invalid_argument("segment attention twin: the view is not a prompt of " + std::to_string(n) +
                                " positions the window attention kernel takes");
  BlockSegmentAttention out{n_heads, n, std::vector<float>(static_cast<size_t>(n_heads) * n, 0.0f)};
  const size_t row = static_cast<size_t>(n_heads) * view.head_dim;
  for (const SegmentPiece& piece : plan_segment_attention(request, n, n_heads, max_piece_floats)) {
    const DeviceKvLayerView v = segment_view(view, piece);
    WindowPlanOptions options;
    options.query_position0 = piece.first_row;
    options.causal = request.causal;
    options.scaled = request.scaled;
    const WindowAttentionPlan plan = plan_window_attention(v, piece.rows, group, options);
    if (plan.max_len != piece.segment_length) throw std::logic_error("segment attention twin: a row stride past the segment");
    const std::vector<float> window = window_attention_twin(v, plan, queries + static_cast<size_t>(piece.first_row) * row);
    for (int h = 0; h < n_heads; ++h)
      for (int m = 0; m < piece.segment_length; ++m) sum_piece_rows(window.data(), piece, group, n, h, m, out.values.data());
  }
  return out;
}

}  // namespace kvevict
