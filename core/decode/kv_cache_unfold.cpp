// Unfolding a KVCache to one stored head per query head (SpindleKV's "fully unfold GQA", spec
// policies.md §4.1 option B and §6 rule 3): each query head gets its own copy of its KV head's
// entries, so a policy can keep a different subset per query head. The copies are real storage;
// only a codebook spanning the layer's heads (LayerCodebook) makes identical copies cheap again.
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/decode/kv_cache.h"

namespace kvevict {

void KVCache::unfold_keep(const std::vector<std::vector<std::vector<int>>>& kept) {
  if (unfolded_) throw std::logic_error("KVCache::unfold_keep: the cache is already unfolded");
  const int n_query = n_kv_heads_ * group_;
  if (static_cast<int>(kept.size()) != n_layers_)
    throw std::invalid_argument("KVCache::unfold_keep: " + std::to_string(kept.size()) + " layers for " +
                                std::to_string(n_layers_));
  for (int l = 0; l < n_layers_; ++l) {
    if (static_cast<int>(kept[l].size()) != n_query)
      throw std::invalid_argument("KVCache::unfold_keep: layer " + std::to_string(l) + " has " +
                                  std::to_string(kept[l].size()) + " index lists for " + std::to_string(n_query) +
                                  " query heads");
    for (int kv = 0; kv < n_kv_heads_; ++kv) {
      const Head& src = head(l, kv);
      if (src.codebook) throw std::logic_error("KVCache::unfold_keep: a codebook-backed head cannot be unfolded");
      check_rows_held("unfold_keep", l, kv);
      const int len = static_cast<int>(src.positions.size());
      for (int g = 0; g < group_; ++g) {
        std::vector<char> seen(len, 0);
        for (int idx : kept[l][kv * group_ + g]) {
          if (idx < 0 || idx >= len || seen[idx])
            throw std::invalid_argument("KVCache::unfold_keep: bad or duplicate index " + std::to_string(idx) +
                                        " for (layer " + std::to_string(l) + ", query head " +
                                        std::to_string(kv * group_ + g) + "), KV head length " + std::to_string(len));
          seen[idx] = 1;
        }
      }
    }
  }
  std::vector<Head> out(static_cast<size_t>(n_layers_) * n_query, empty_head());
  for (int l = 0; l < n_layers_; ++l) {
    for (int kv = 0; kv < n_kv_heads_; ++kv) {
      Head& src = heads_[static_cast<size_t>(l) * n_kv_heads_ + kv];
      for (int g = 0; g < group_; ++g) {
        const std::vector<int>& idx = kept[l][kv * group_ + g];
        Head& dst = out[static_cast<size_t>(l) * n_query + kv * group_ + g];
        dst.keys.resize(idx.size());
        dst.values.resize(idx.size());
        dst.positions.resize(idx.size());
        for (size_t i = 0; i < idx.size(); ++i) {
          const size_t t = static_cast<size_t>(idx[i]);
          dst.keys.copy_row_from(i, src.keys, t);
          dst.values.copy_row_from(i, src.values, t);
          dst.positions[i] = src.positions[t];
        }
      }
      // Each folded head is released once its copies exist: the peak is the folded cache plus
      // the copies made so far (small when `kept` is an eviction's selection).
      src.keys.release();
      src.values.release();
      std::vector<int32_t>().swap(src.positions);
    }
  }
  heads_ = std::move(out);
  n_stored_ = n_query;
  unfolded_ = true;
  if (listener_.ptr) listener_.ptr->on_unfold();
}

void KVCache::unfold() {
  const int n_query = n_kv_heads_ * group_;
  std::vector<std::vector<std::vector<int>>> all(n_layers_, std::vector<std::vector<int>>(n_query));
  for (int l = 0; l < n_layers_; ++l)
    for (int q = 0; q < n_query; ++q) {
      const int len = length(l, q / group_);
      all[l][q].resize(len);
      for (int t = 0; t < len; ++t) all[l][q][t] = t;
    }
  unfold_keep(all);
}

}  // namespace kvevict
