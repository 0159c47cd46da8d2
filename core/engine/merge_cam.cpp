#include "core/engine/merge_cam.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/engine/counter_rng.h"

namespace kvevict {
namespace {

// One candidate that passed its draw: it adds value / a to kept ranks start .. end - 1.
struct CamMerge {
  int index = 0;           // cache index of the evicted entry
  int start = 0, end = 0;  // its window, as ranks in the sorted kept indices
};

// The min(n, |E|) evicted entries of highest score (ties: later index first), ascending.
std::vector<int> cam_candidates(std::span<const char> is_kept, std::span<const float> scores, int n) {
  std::vector<int> evicted;
  for (size_t t = 0; t < is_kept.size(); ++t)
    if (!is_kept[t]) evicted.push_back(static_cast<int>(t));
  const auto rank = [&](int t) {
    const float s = scores[t];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  const size_t keep = std::min(evicted.size(), static_cast<size_t>(std::max(n, 0)));
  std::partial_sort(evicted.begin(), evicted.begin() + keep, evicted.end(), [&](int a, int b) {
    const float x = rank(a), y = rank(b);
    return x != y ? x > y : a > b;
  });
  evicted.resize(keep);
  std::sort(evicted.begin(), evicted.end());
  return evicted;
}

// The Bernoulli probability of kvpress: clamp(A_e / window mean, 0, 1), NaN -> 0, inf -> 1.
double merge_probability(double own, double window_mean) {
  const double ratio = own / window_mean;
  if (std::isnan(ratio)) return 0.0;
  if (std::isinf(ratio)) return 1.0;
  return std::clamp(ratio, 0.0, 1.0);
}

}  // namespace

MergeOnEvictCounts merge_cam(const PolicyMerge& merge, const KVCache& cache, int layer, int head,
                             std::span<const int> kept, std::span<const char> is_kept, const MergeContext& context,
                             CachedRowMerges& rows) {
  const size_t T = static_cast<size_t>(cache.length(layer, head));
  if (context.scores.size() != T || context.attention.size() != T || context.positions.size() != T ||
      is_kept.size() != T)
    throw std::logic_error("merge_cam: layer " + std::to_string(layer) + " head " + std::to_string(head) + " holds " +
                           std::to_string(T) + " entries; the merge context has " +
                           std::to_string(context.scores.size()) + " scores, " +
                           std::to_string(context.attention.size()) + " attention sums, " +
                           std::to_string(context.positions.size()) + " positions");
  if (merge.merge_budget < 1) throw std::logic_error("merge_cam: merge_budget must be >= 1");
  MergeOnEvictCounts counts;
  counts.evicted = static_cast<int64_t>(T - kept.size());
  if (counts.evicted == 0 || kept.empty()) return counts;

  std::vector<int> ranked(kept.begin(), kept.end());
  std::sort(ranked.begin(), ranked.end());
  const int K = static_cast<int>(ranked.size());
  std::vector<double> prefix(K + 1, 0.0);  // prefix sums of A over the sorted kept indices
  for (int j = 0; j < K; ++j) prefix[j + 1] = prefix[j] + context.attention[ranked[j]];

  std::vector<CamMerge> merges;
  for (const int e : cam_candidates(is_kept, context.scores, context.new_entries)) {
    CamMerge m;
    m.index = e;
    m.start = static_cast<int>(std::lower_bound(ranked.begin(), ranked.end(), e) - ranked.begin());
    m.end = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(m.start) + merge.merge_budget, K));
    if (m.end == m.start) continue;
    const double mean = (prefix[m.end] - prefix[m.start]) / (m.end - m.start);
    const double p = merge_probability(context.attention[e], mean);
    const float u = counter_uniform(context.seed, layer, head, context.positions[e], kMergeStream);
    if (!(u < p)) continue;
    merges.push_back(m);
  }
  counts.merged = static_cast<int64_t>(merges.size());
  if (merges.empty()) return counts;

  // One fold per kept rank that some window covers: v_j + sum over the windows covering it of
  // v_e / a_e, terms in cache order of e (row_merges.h's arithmetic: fma(1 / a_e, v_e, acc)).
  // Windows are contiguous rank ranges whose starts and ends ascend with e, so a rank's terms are
  // the merges [first, last) covering it, found by two cursors.
  RowFolds folds;
  folds.values = true;
  size_t first = 0, last = 0;
  for (int rank = merges.front().start; rank < K && first < merges.size(); ++rank) {
    while (first < merges.size() && merges[first].end <= rank) ++first;
    while (last < merges.size() && merges[last].start <= rank) ++last;
    if (first == last) continue;
    RowFold f;
    f.target = ranked[static_cast<size_t>(rank)];
    f.first_term = static_cast<int32_t>(folds.terms.size());
    for (size_t i = first; i < last; ++i)
      folds.terms.push_back({merges[i].index, 1.0 / static_cast<double>(merges[i].end - merges[i].start)});
    f.terms = static_cast<int32_t>(folds.terms.size()) - f.first_term;
    folds.folds.push_back(f);
  }
  rows.fold_rows(layer, head, folds);
  return counts;
}

}  // namespace kvevict
