#pragma once
// Random row merges (core/decode/row_merges.h) for one head of T entries, shared by the CPU test
// of the twin and the host (row_merges_test.cpp) and the GPU test of the device cache
// (device_kv_cache_gpu_test.cpp), and random rows with ties planted for the search.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/decode/row_merges.h"

namespace kvevict::test {

struct RowMergeCase {
  std::vector<int> kept;     // a random subset, in random order
  std::vector<int> evicted;  // the others, ascending
  RowFolds folds;            // targets among kept, terms among evicted, random weights
};

inline RowMergeCase random_row_merge_case(int T, std::mt19937& rng) {
  RowMergeCase c;
  std::vector<int> order(static_cast<size_t>(T));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const int K = 1 + static_cast<int>(rng() % static_cast<uint32_t>(T - 1));  // at least one of each
  c.kept.assign(order.begin(), order.begin() + K);
  c.evicted.assign(order.begin() + K, order.end());
  std::sort(c.evicted.begin(), c.evicted.end());
  std::uniform_real_distribution<double> weight(-1.0, 1.0), divisor(0.5, 3.0);
  c.folds.keys = rng() % 2 == 0;
  c.folds.values = !c.folds.keys || rng() % 2 == 0;
  for (int i = 0; i < K; ++i) {
    if (rng() % 2) continue;  // about half the kept entries receive something
    RowFold f;
    f.target = c.kept[static_cast<size_t>(i)];
    f.first_term = static_cast<int32_t>(c.folds.terms.size());
    f.terms = static_cast<int32_t>(rng() % 5);  // 0 .. 4 terms (a term may serve several folds)
    for (int32_t t = 0; t < f.terms; ++t)
      c.folds.terms.push_back({c.evicted[rng() % c.evicted.size()], weight(rng)});
    f.self_weight = 1.0 + 0.5 * weight(rng);
    f.divisor = divisor(rng);
    c.folds.folds.push_back(f);
  }
  return c;
}

// [T][d] random rows in [-2, 2]; every 7th row repeats the one before (equal keys: cosine ties),
// row 0 is zero (the clamped norm).
inline std::vector<float> random_rows_with_ties(int T, int d, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> rows(static_cast<size_t>(T) * d);
  for (float& x : rows) x = u(rng);
  for (int t = 1; t < T; ++t)
    if (t % 7 == 0) std::copy_n(rows.begin() + (t - 1) * d, d, rows.begin() + t * d);
  std::fill_n(rows.begin(), d, 0.0f);
  return rows;
}

}  // namespace kvevict::test
