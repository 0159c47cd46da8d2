// Planning of the device cache's row merges; contract in device_kv_merges.h.
#include "core/decode/device_kv_merges.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace kvevict {
namespace {

int64_t head_length(const DeviceKvLayout& layout, int layer, int head, const char* what) {
  if (layer < 0 || layer >= layout.geometry().n_layers || head < 0 || head >= layout.geometry().n_heads)
    throw std::invalid_argument(std::string("device KV ") + what + ": layer " + std::to_string(layer) + " head " +
                                std::to_string(head) + " outside the cache");
  return layout.length(layer, head);
}

void check_rows(std::span<const int> rows, int64_t length, const char* what) {
  for (const int t : rows)
    if (t < 0 || t >= length)
      throw std::invalid_argument(std::string("device KV ") + what + ": row " + std::to_string(t) +
                                  " outside a head of " + std::to_string(length) + " entries");
}

}  // namespace

DeviceKvNearestPlan plan_nearest_kept_keys(const DeviceKvLayout& layout, int layer, const void* keys,
                                           std::span<const KeptKeySearch> searches) {
  DeviceKvNearestPlan p;
  for (const KeptKeySearch& s : searches) {
    const int64_t length = head_length(layout, layer, s.head, "nearest_kept_keys");
    check_rows(s.kept, length, "nearest_kept_keys");
    check_rows(s.evicted, length, "nearest_kept_keys");
    if (s.kept.empty() && !s.evicted.empty())
      throw std::invalid_argument("device KV nearest_kept_keys: no kept entry to match");
    const int64_t base = layout.layer(layer).heads.at(static_cast<size_t>(s.head)).base_row;
    const int32_t begin = static_cast<int32_t>(p.kept_rows.size());
    for (const int t : s.kept) p.kept_rows.push_back(base + t);
    const int32_t end = static_cast<int32_t>(p.kept_rows.size());
    p.first_match.push_back(p.evicted_rows.size());
    for (const int t : s.evicted) {
      p.evicted_rows.push_back(base + t);
      p.kept_begin.push_back(begin);
      p.kept_end.push_back(end);
    }
  }
  DeviceKvNearestArgs& a = p.args;
  a.keys = keys;
  a.type = layout.geometry().type;
  a.head_dim = layout.geometry().head_dim;
  a.n_kept = static_cast<int32_t>(p.kept_rows.size());
  a.n_evicted = static_cast<int32_t>(p.evicted_rows.size());
  return p;
}

std::vector<std::vector<KeptKeyMatch>> DeviceKvNearestPlan::split(std::span<const KeptKeyMatch> matches) const {
  std::vector<std::vector<KeptKeyMatch>> out(first_match.size());
  for (size_t i = 0; i < first_match.size(); ++i) {
    const size_t end = i + 1 < first_match.size() ? first_match[i + 1] : evicted_rows.size();
    out[i].assign(matches.begin() + static_cast<std::ptrdiff_t>(first_match[i]),
                  matches.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

DeviceKvValueNormArgs plan_value_norms(const DeviceKvLayout& layout, int layer, int head, const void* values,
                                       std::span<const int> rows) {
  const int64_t length = head_length(layout, layer, head, "value_norms");
  check_rows(rows, length, "value_norms");
  DeviceKvValueNormArgs a;
  a.values = values;
  a.type = layout.geometry().type;
  a.head_dim = layout.geometry().head_dim;
  a.base_row = layout.layer(layer).heads.at(static_cast<size_t>(head)).base_row;
  a.n = static_cast<int32_t>(rows.size());
  return a;
}

DeviceKvFoldArgs plan_fold_rows(const DeviceKvLayout& layout, int layer, int head, void* keys, void* values,
                                const RowFolds& folds) {
  const int64_t length = head_length(layout, layer, head, "fold_rows");
  std::vector<char> target(static_cast<size_t>(length), 0);
  for (const RowFold& f : folds.folds) {
    check_rows(std::span<const int>(&f.target, 1), length, "fold_rows");
    if (target[static_cast<size_t>(f.target)])
      throw std::invalid_argument("device KV fold_rows: row " + std::to_string(f.target) + " is folded twice");
    target[static_cast<size_t>(f.target)] = 1;
    if (f.first_term < 0 || f.terms < 0 || static_cast<size_t>(f.first_term) + static_cast<size_t>(f.terms) > folds.terms.size())
      throw std::invalid_argument("device KV fold_rows: a fold's terms lie outside the list");
  }
  for (const RowFoldTerm& t : folds.terms) {
    check_rows(std::span<const int>(&t.row, 1), length, "fold_rows");
    if (target[static_cast<size_t>(t.row)])
      throw std::invalid_argument("device KV fold_rows: row " + std::to_string(t.row) +
                                  " is both a fold's target and a term");
  }
  DeviceKvFoldArgs a;
  a.keys = keys;
  a.values = values;
  a.type = layout.geometry().type;
  a.head_dim = layout.geometry().head_dim;
  a.base_row = layout.layer(layer).heads.at(static_cast<size_t>(head)).base_row;
  a.n_folds = static_cast<int32_t>(folds.folds.size());
  a.fold_keys = folds.keys;
  a.fold_values = folds.values;
  return a;
}

}  // namespace kvevict
