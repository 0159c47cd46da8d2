#include "core/engine/segment_observation.h"

#include <algorithm>
#include <cstring>

#include "core/engine/attention_signals.h"

namespace kvevict {

void SegmentQueries::reset(int n_layers, int segment, int window, int prompt_len, size_t row_floats) {
  segment_ = segment;
  window_ = window;
  prompt_len_ = prompt_len;
  row_floats_ = row_floats;
  data_.assign(n_layers, {});
  positions_.assign(n_layers, {});
}

bool SegmentQueries::observes(int position) const {
  if (segment_ <= 0 || window_ <= 0 || position < 0 || position >= prompt_len_) return false;
  const int64_t end = std::min<int64_t>((static_cast<int64_t>(position) / segment_ + 1) * segment_, prompt_len_);
  return position >= end - window_;
}

void SegmentQueries::record(int layer, const float* rows, int n_rows, int first_position) {
  std::vector<float>& data = data_[layer];
  std::vector<int32_t>& pos = positions_[layer];
  for (int i = 0; i < n_rows; ++i) {
    const int p = first_position + i;
    if (!observes(p) || (!pos.empty() && p <= pos.back())) continue;  // ascending, each once
    pos.push_back(p);
    data.insert(data.end(), rows + static_cast<size_t>(i) * row_floats_, rows + static_cast<size_t>(i + 1) * row_floats_);
  }
}

void SegmentQueries::attention(int layer, int kv_head, int group, int n_heads, const float* keys,
                               const int32_t* positions, int T, int d, bool causal, bool scaled, float* out) const {
  std::fill(out, out + static_cast<size_t>(group) * T, 0.0f);
  const std::vector<int32_t>& qpos = positions_[layer];
  const float* qdata = data_[layer].data();
  // The cache indices of each segment's entries, in one pass (entries past the prompt belong to
  // no segment with queries).
  const int n_segments = (prompt_len_ + segment_ - 1) / segment_;
  std::vector<std::vector<int>> by_segment(static_cast<size_t>(n_segments));
  for (int t = 0; t < T; ++t)
    if (positions[t] >= 0 && positions[t] < prompt_len_) by_segment[positions[t] / segment_].push_back(t);
  std::vector<float> seg_keys, probs;  // [n][d], [group][Wq][n]
  std::vector<int32_t> seg_pos;
  size_t i = 0;
  while (i < qpos.size()) {  // one segment's observation queries: consecutive positions, one segment
    const int s = qpos[i] / segment_;
    size_t j = i;
    while (j < qpos.size() && qpos[j] / segment_ == s) ++j;
    const int Wq = static_cast<int>(j - i);
    const std::vector<int>& members = by_segment[s];
    const int n = static_cast<int>(members.size());
    if (n > 0) {
      seg_keys.resize(static_cast<size_t>(n) * d);
      seg_pos.resize(n);
      for (int m = 0; m < n; ++m) {
        std::memcpy(seg_keys.data() + static_cast<size_t>(m) * d, keys + static_cast<size_t>(members[m]) * d,
                    sizeof(float) * d);
        seg_pos[m] = positions[members[m]];
      }
      probs.resize(static_cast<size_t>(group) * Wq * n);
      compute_window_attention(qdata + i * row_floats_, Wq, n_heads, qpos[i], kv_head, group, seg_keys.data(),
                               seg_pos.data(), n, d, probs.data(), causal, scaled);
      for (int g = 0; g < group; ++g)
        for (int w = 0; w < Wq; ++w) {
          const float* row = probs.data() + (static_cast<size_t>(g) * Wq + w) * n;
          for (int m = 0; m < n; ++m) out[static_cast<size_t>(g) * T + members[m]] += row[m];
        }
    }
    i = j;
  }
}

}  // namespace kvevict
