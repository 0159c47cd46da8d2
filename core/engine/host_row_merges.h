#pragma once
// The row merges (core/decode/row_merges.h) over a host KVCache that holds the rows: what
// merge-on-evict runs when the rows are on the host (the CPU decoder; a device decoder's calls
// that read rows). Writes go through KVCache::write_entry, so a device mirror hears of them.
//
// nearest_kept_keys is the all-double search of row_merges.h, made affordable (E x K x d per
// head): a float pass over unit-normalised keys shortlists, per evicted key, the kept keys within
// kShortlist of the float maximum, and only those get the double cosine, in kept order. A float
// cosine of unit rows is within ~d x 2^-24 of the double one (below 1e-5 for d <= 256), far inside
// the shortlist, so the result is the all-double search's. Memory: the kept keys once ([K][d]
// floats, twice) and one row of K floats per thread.
#include "core/decode/kv_cache.h"
#include "core/decode/row_merges.h"

namespace kvevict {

class HostRowMerges final : public CachedRowMerges {
 public:
  explicit HostRowMerges(KVCache& cache) : cache_(cache) {}
  std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer, std::span<const KeptKeySearch> searches) override;
  std::vector<double> value_norms(int layer, int head, std::span<const int> rows) override;
  void fold_rows(int layer, int head, const RowFolds& folds) override;

 private:
  std::vector<KeptKeyMatch> search_head(int layer, int head, std::span<const int> kept, std::span<const int> evicted);
  KVCache& cache_;
};

}  // namespace kvevict
