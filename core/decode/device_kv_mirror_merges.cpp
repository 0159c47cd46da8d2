// DeviceKvMirror's row merges on the device (contract in device_kv_mirror.h, row_merges.h).
#include "core/decode/device_kv_mirror.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvevict {

void DeviceKvMirror::refuse_unmergeable(int layer, int head, const char* what) const {
  const std::string where = "device KV mirror: " + std::string(what) + " on layer " + std::to_string(layer) +
                            " head " + std::to_string(head);
  if (layer < 0 || layer >= n_layers_ || head < 0 || head >= n_heads_)
    throw std::invalid_argument(where + ": outside the cache");
  if (unfolded_ || cache_.unfolded()) throw std::logic_error(where + " of an unfolded cache (not mirrored)");
  if (host_lag_[static_cast<size_t>(layer)] > 0)
    throw std::logic_error(where + " while the host lags the device (the host numbers fewer rows)");
  if (cache_.is_codebook(layer, head))
    throw std::logic_error(where + ", a codebook head (its rows are the host's reconstruction)");
}

std::vector<std::vector<KeptKeyMatch>> DeviceKvMirror::nearest_kept_keys(int layer,
                                                                         std::span<const KeptKeySearch> searches) {
  for (const KeptKeySearch& s : searches) refuse_unmergeable(layer, s.head, "nearest_kept_keys");
  if (searches.empty()) return {};
  flush(layer);  // device row t is host row t from here
  return backend_.nearest_kept_keys(layer, searches);
}

std::vector<double> DeviceKvMirror::value_norms(int layer, int head, std::span<const int> rows) {
  refuse_unmergeable(layer, head, "value_norms");
  flush(layer);
  return backend_.value_norms(layer, head, rows);
}

void DeviceKvMirror::fold_rows(int layer, int head, const RowFolds& folds) {
  refuse_unmergeable(layer, head, "fold_rows");
  if (folds.folds.empty() || (!folds.keys && !folds.values)) return;
  flush(layer);
  backend_.fold_rows(layer, head, folds);
  counts_.rows_folded += static_cast<int64_t>(folds.folds.size());
  if (cache_.rows_held_elsewhere(layer, head)) {
    // The rows are on the device only; norms held with the positions follow the folded rows.
    if (!cache_.holds_row_norms(layer, head)) return;
    std::vector<int64_t> first(static_cast<size_t>(n_heads_), 0), count(static_cast<size_t>(n_heads_), 0);
    count[static_cast<size_t>(head)] = cache_.length(layer, head);
    const std::vector<RowNorms> norms = backend_.row_norms(layer, first, count);
    cache_.set_held_row_norms(layer, head, norms);
    return;
  }
  // The host's rows of the folded entries are stale: placeholders until sync_host reads them back.
  std::vector<int>& listed = placeholders_[static_cast<size_t>(layer) * n_heads_ + head];
  for (const RowFold& f : folds.folds) listed.push_back(f.target);
  std::sort(listed.begin(), listed.end());
  listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
}

}  // namespace kvevict
