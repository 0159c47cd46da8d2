// The row merges over a host KVCache; contract in host_row_merges.h and core/decode/row_merges.h.
#include "core/engine/host_row_merges.h"

#include <limits>
#include <stdexcept>
#include <string>

namespace kvevict {
namespace {

constexpr float kShortlist = 1e-3f;

// A float dot product in 8 independent lanes (vectorisable, unlike one ordered sum); only used to
// shortlist candidates, never as the cosine itself.
float dot_lanes(const float* a, const float* b, int d) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int c = 0;
  for (; c + 8 <= d; c += 8)
    for (int k = 0; k < 8; ++k) lane[k] += a[c + k] * b[c + k];
  float s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; c < d; ++c) s += a[c] * b[c];
  return s;
}

void check_head(const KVCache& cache, int layer, int head, const char* what) {
  if (layer < 0 || layer >= cache.n_layers() || head < 0 || head >= cache.n_stored_heads())
    throw std::invalid_argument(std::string("host row merges: ") + what + " on layer " + std::to_string(layer) +
                                " head " + std::to_string(head));
  if (cache.is_codebook(layer, head))
    throw std::logic_error(std::string("host row merges: ") + what + " on codebook-backed layer " +
                           std::to_string(layer) + " head " + std::to_string(head));
}

void check_index(int t, int length) {
  if (t < 0 || t >= length)
    throw std::invalid_argument("host row merges: index " + std::to_string(t) + " outside a head of " +
                                std::to_string(length) + " entries");
}

// Rows `index` of one side of the head as f32, [n][d].
std::vector<float> rows_of(const KVCache& cache, int layer, int head, std::span<const int> index, bool keys) {
  const int d = cache.head_dim(), T = cache.length(layer, head);
  std::vector<float> out(index.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < index.size(); ++i) {
    check_index(index[i], T);
    float* row = out.data() + i * d;
    if (keys) cache.reconstruct_keys(layer, head, index[i], index[i] + 1, row);
    else cache.reconstruct_values(layer, head, index[i], index[i] + 1, row);
  }
  return out;
}

}  // namespace

std::vector<std::vector<KeptKeyMatch>> HostRowMerges::nearest_kept_keys(int layer,
                                                                        std::span<const KeptKeySearch> searches) {
  std::vector<std::vector<KeptKeyMatch>> out;
  for (const KeptKeySearch& s : searches) out.push_back(search_head(layer, s.head, s.kept, s.evicted));
  return out;
}

std::vector<KeptKeyMatch> HostRowMerges::search_head(int layer, int head, std::span<const int> kept,
                                                     std::span<const int> evicted) {
  check_head(cache_, layer, head, "nearest_kept_keys");
  if (kept.empty() && !evicted.empty()) throw std::invalid_argument("host row merges: no kept entry to match");
  const int d = cache_.head_dim();
  const size_t E = evicted.size(), K = kept.size();
  const std::vector<float> keys = rows_of(cache_, layer, head, kept, true);
  const std::vector<float> probes = rows_of(cache_, layer, head, evicted, true);
  std::vector<float> unit(K * d);
  std::vector<double> norm(K);
  for (size_t j = 0; j < K; ++j) {
    const float* row = keys.data() + j * d;
    norm[j] = merge_key_norm([&](int c) { return row[c]; }, d);
    for (int c = 0; c < d; ++c) unit[j * d + c] = static_cast<float>(row[c] / norm[j]);
  }
  std::vector<KeptKeyMatch> out(E, KeptKeyMatch{-std::numeric_limits<double>::infinity(), 0});
  // Evicted entries are independent (each writes its own match): split over threads.
#pragma omp parallel for schedule(static) if (E * K * static_cast<size_t>(d) > (size_t{1} << 22))
  for (size_t e = 0; e < E; ++e) {
    thread_local std::vector<float> probe, approx;
    probe.resize(d);
    approx.resize(K);
    const float* ke = probes.data() + e * d;
    const auto load_e = [&](int c) { return ke[c]; };
    const double ne = merge_key_norm(load_e, d);
    for (int c = 0; c < d; ++c) probe[c] = static_cast<float>(ke[c] / ne);
    float top = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < K; ++j) {
      approx[j] = dot_lanes(probe.data(), unit.data() + j * d, d);
      if (approx[j] > top) top = approx[j];  // NaN never wins, as in the double search
    }
    for (size_t j = 0; j < K; ++j) {
      if (!(approx[j] >= top - kShortlist)) continue;
      const float* kj = keys.data() + j * d;
      const double s = merge_key_cosine(load_e, ne, [&](int c) { return kj[c]; }, norm[j], d);
      if (s > out[e].cosine) out[e] = {s, static_cast<int32_t>(j)};
    }
  }
  return out;
}

std::vector<double> HostRowMerges::value_norms(int layer, int head, std::span<const int> rows) {
  check_head(cache_, layer, head, "value_norms");
  const int d = cache_.head_dim();
  const std::vector<float> values = rows_of(cache_, layer, head, rows, false);
  std::vector<double> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* row = values.data() + i * d;
    out[i] = merge_row_norm([&](int c) { return row[c]; }, d);
  }
  return out;
}

void HostRowMerges::fold_rows(int layer, int head, const RowFolds& folds) {
  check_head(cache_, layer, head, "fold_rows");
  const int d = cache_.head_dim(), T = cache_.length(layer, head);
  std::vector<int> read;  // every row a fold reads, once each: its index in `read` is its slot
  std::vector<int> slot(static_cast<size_t>(T), -1);
  const auto note = [&](int t) {
    check_index(t, T);
    if (slot[static_cast<size_t>(t)] < 0) {
      slot[static_cast<size_t>(t)] = static_cast<int>(read.size());
      read.push_back(t);
    }
  };
  for (const RowFold& f : folds.folds) {
    if (f.first_term < 0 || f.terms < 0 || static_cast<size_t>(f.first_term) + f.terms > folds.terms.size())
      throw std::invalid_argument("host row merges: a fold's terms lie outside the list");
    note(f.target);
    for (int32_t i = 0; i < f.terms; ++i) note(folds.terms[static_cast<size_t>(f.first_term + i)].row);
  }
  // Every row read before any is written (terms are never targets, but a bad list must not see its
  // own writes either).
  const std::vector<float> keys = folds.keys ? rows_of(cache_, layer, head, read, true) : std::vector<float>{};
  const std::vector<float> values = folds.values ? rows_of(cache_, layer, head, read, false) : std::vector<float>{};
  std::vector<float> key_out(d), value_out(d);
  for (const RowFold& f : folds.folds) {
    const auto side = [&](const std::vector<float>& rows, std::vector<float>& out) {
      const auto load = [&](int t, int c) { return rows[static_cast<size_t>(slot[static_cast<size_t>(t)]) * d + c]; };
      for (int c = 0; c < d; ++c) out[static_cast<size_t>(c)] = fold_row_element(f, folds.terms.data(), load, c);
    };
    if (folds.keys) side(keys, key_out);
    if (folds.values) side(values, value_out);
    cache_.write_entry(layer, head, f.target, folds.keys ? key_out.data() : nullptr,
                       folds.values ? value_out.data() : nullptr);
  }
}

}  // namespace kvevict
