#include "core/engine/merge_state.h"

#include <stdexcept>
#include <string>

namespace kvevict {

bool MergeOnEvictState::needs_decode_attention(const PolicyMerge& merge) {
  return merge.enabled && merge.method == MergeMethod::Cam;
}

bool MergeOnEvictState::merges_per_layer(const PolicyMerge& merge) {
  return merge.enabled && merge.method == MergeMethod::D2o;
}

void MergeOnEvictState::reset(const PolicyMerge& merge, int layers, int query_heads) {
  d2o_.assign(merges_per_layer(merge) ? layers : 0, D2oThreshold{});
  active_ = needs_decode_attention(merge);
  attention_.assign(active_ ? layers : 0, std::vector<std::vector<float>>(query_heads));
  appended_.assign(active_ ? layers : 0, 0);
}

void MergeOnEvictState::record_decode(const LayerSignals& s, const KVCache& cache) {
  if (!active_) return;
  if (!s.accumulated_attention) throw std::logic_error("merge state: the decoder did not record the attention column sums");
  auto& layer = attention_.at(s.layer);
  for (size_t h = 0; h < layer.size(); ++h) {
    const std::vector<float>& add = s.accumulated_attention->at(h);
    const size_t T = cache.length(s.layer, cache.stored_head_of_query(static_cast<int>(h)));
    layer[h].resize(T, 0.0f);
    for (size_t t = 0; t < T && t < add.size(); ++t) layer[h][t] += add[t];
  }
  appended_[s.layer] += s.n_tokens;
}

void MergeOnEvictState::kept(int layer, int head, int group, std::span<const int> kept, size_t length) {
  if (!active_) return;
  for (int g = 0; g < group; ++g) {
    std::vector<float>& v = attention_.at(layer).at(static_cast<size_t>(head) * group + g);
    if (v.empty()) continue;
    if (v.size() != length)
      throw std::logic_error("merge state: layer " + std::to_string(layer) + " head " + std::to_string(head) + " holds " +
                             std::to_string(v.size()) + " attention sums, the cache " + std::to_string(length));
    std::vector<float> next(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) next[i] = v.at(kept[i]);
    v.swap(next);
  }
}

void MergeOnEvictState::evicted(int layer) {
  if (active_) appended_.at(layer) = 0;
}

MergeContext MergeOnEvictState::context(int layer, int head, int group, int T, std::span<const float> scores,
                                        uint64_t seed, std::span<const int32_t> positions) const {
  MergeContext c;
  c.scores = scores;
  c.seed = seed;
  c.positions = positions;
  if (!active_) return c;
  c.new_entries = appended_.at(layer);
  std::vector<double> sum(T, 0.0);
  for (int g = 0; g < group; ++g) {
    const std::vector<float>& v = attention_.at(layer).at(static_cast<size_t>(head) * group + g);
    for (int t = 0; t < T && t < static_cast<int>(v.size()); ++t) sum[t] += v[t];
  }
  c.attention.resize(T);
  for (int t = 0; t < T; ++t) c.attention[t] = static_cast<float>(sum[t] / group);
  return c;
}

MergeOnEvictCounts MergeOnEvictState::merge_layer(const PolicyMerge& merge, KVCache& cache, int layer,
                                                const std::vector<std::vector<int>>& kept, CachedRowMerges* rows) {
  return merge_on_evict_layer(merge, cache, layer, kept, d2o_.at(layer), rows);
}

}  // namespace kvevict
