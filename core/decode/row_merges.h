#pragma once
// Merges of cached rows (merge-on-evict, core/engine/merge_on_evict.h), split into the two things
// that read or write the rows, so that whoever holds them runs them: the host over its KVCache
// (core/engine/host_row_merges.h), or a decoder whose cache lives on a device over the device
// cache (DeviceKvMirror, over cuda::DeviceKvCache or its CPU twin). The rule itself (thresholds,
// weights, which entry folds into which) stays on the host and sees only what these return.
//
//   nearest_kept_keys: for each evicted entry e (cache index), the kept entry j of highest cosine
//     cos(k_e, k_j) = dot(k_e, k_j) / (n_e n_j) between the keys as cached, n = max(|k|, 1e-6);
//     the first in `kept` order on ties; a NaN cosine never wins (none wins: cosine -inf, kept 0).
//   value_norms: |v_t| of each listed entry, unclamped (Nearest's weights).
//   fold_rows: for each fold f, for x in the folded sides (keys and/or values):
//       x_target <- (self_weight x_target + sum_i weight_i x_row_i) / divisor
//     the sum taken in the terms' order.
//
// One arithmetic wherever it runs, so that the host, the device kernels and their CPU twin give the
// same bits for the same stored words: every element is the stored word converted to f32; dot
// products and squared norms sum f32 x f32 products in double in element order (exact products);
// square roots and divisions in double (correctly rounded on both sides); a fold accumulates with
// fused multiply-adds in double, acc <- fma(weight_i, x_i, acc) from 0, then
// fma(self_weight, x_target, acc) / divisor, rounded once to f32 and then to the cache's KvType as
// an append rounds. A fold's terms are entries that are not folded themselves (evicted entries into
// kept ones), so folds in any order, or all at once, give the same result.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/util/host_device.h"

namespace kvevict {

// Norms below this are clamped (torch's normalize eps, kvpress's _EPS).
inline constexpr double kMergeNormEps = 1e-6;

// One head's part of a layer's nearest_kept_keys call.
struct KeptKeySearch {
  int head = 0;
  std::span<const int> kept;     // not empty when evicted is not
  std::span<const int> evicted;
};

// nearest_kept_keys' answer for one evicted entry.
struct KeptKeyMatch {
  double cosine = 0;  // -inf when no kept key gave a cosine (all NaN)
  int32_t kept = 0;   // position in `kept` of the match
};

struct RowFold {
  int32_t target = 0;      // cache index of the row written
  int32_t first_term = 0;  // its terms are RowFolds::terms[first_term, first_term + terms)
  int32_t terms = 0;
  double self_weight = 1;
  double divisor = 1;
};
struct RowFoldTerm {
  int32_t row = 0;  // cache index of a row read (never a fold's target)
  double weight = 0;
};
// The folds of one (layer, stored head): at most one per target.
struct RowFolds {
  bool keys = false, values = false;  // the sides folded
  std::vector<RowFold> folds;
  std::vector<RowFoldTerm> terms;
};

// |row| in double (element i given by load(i) as f32): value_norms' answer.
template <class Load>
KVEVICT_HOST_DEVICE inline double merge_row_norm(const Load& load, int d) {
  double s = 0;
  for (int i = 0; i < d; ++i) s += static_cast<double>(load(i)) * static_cast<double>(load(i));
  return sqrt(s);
}

// The same clamped at kMergeNormEps as std::max(n, eps) clamps (a NaN norm stays NaN): the cosine's.
template <class Load>
KVEVICT_HOST_DEVICE inline double merge_key_norm(const Load& load, int d) {
  const double n = merge_row_norm(load, d);
  return n < kMergeNormEps ? kMergeNormEps : n;
}

// cos(a, b) with their norms (merge_key_norm).
template <class LoadA, class LoadB>
KVEVICT_HOST_DEVICE inline double merge_key_cosine(const LoadA& a, double norm_a, const LoadB& b, double norm_b,
                                                   int d) {
  double s = 0;
  for (int i = 0; i < d; ++i) s += static_cast<double>(a(i)) * static_cast<double>(b(i));
  return s / (norm_a * norm_b);
}

// Whether (cosine, kept position) beats the best so far, as the search in kept order decides:
// higher wins, the earlier position on a tie (for reductions that meet positions out of order); NaN
// never wins.
KVEVICT_HOST_DEVICE inline bool better_key_match(double cosine, int32_t kept, double best, int32_t best_kept) {
  return cosine > best || (cosine == best && kept < best_kept);
}

// Element c of fold f's new row on one side; load(row, c) gives the stored element as f32.
template <class Load>
KVEVICT_HOST_DEVICE inline float fold_row_element(const RowFold& f, const RowFoldTerm* terms, const Load& load,
                                                  int c) {
  double acc = 0;
  for (int32_t i = 0; i < f.terms; ++i) {
    const RowFoldTerm& t = terms[f.first_term + i];
    acc = fma(t.weight, static_cast<double>(load(t.row, c)), acc);
  }
  return static_cast<float>(fma(f.self_weight, static_cast<double>(load(f.target, c)), acc) / f.divisor);
}

// The two operations, over whatever holds the rows. Indices are cache indices of (layer, stored
// head) as the host cache numbers them at the call; implementations throw std::invalid_argument for
// an index outside the head and std::logic_error where they cannot run (a codebook head, an
// unfolded cache, a lagging host copy).
class CachedRowMerges {
 public:
  virtual ~CachedRowMerges() = default;
  // Every listed head of one layer at once (one round trip for a device): out[i][e] answers
  // searches[i].evicted[e].
  virtual std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer,
                                                                   std::span<const KeptKeySearch> searches) = 0;
  // One norm per entry of `rows`.
  virtual std::vector<double> value_norms(int layer, int head, std::span<const int> rows) = 0;
  virtual void fold_rows(int layer, int head, const RowFolds& folds) = 0;
};

}  // namespace kvevict
