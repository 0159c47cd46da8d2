#include "core/engine/merge_on_evict.h"

#include "core/engine/host_row_merges.h"
#include "core/engine/merge_cam.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvevict {
namespace {

// One head's search: its kept list, its evicted entries (none when E or kept is empty) and their
// kept matches.
struct Matches {
  int head = 0;
  std::span<const int> kept;
  std::vector<int> evicted;  // cache indices, ascending
  std::vector<KeptKeyMatch> match;
};

// The evicted entries of a head (none when nothing is evicted or nothing kept).
std::vector<int> evicted_of(const std::vector<char>& is_kept, size_t kept) {
  std::vector<int> evicted;
  if (kept == 0) return evicted;
  for (size_t t = 0; t < is_kept.size(); ++t)
    if (!is_kept[t]) evicted.push_back(static_cast<int>(t));
  return evicted;
}

// Every head's evicted entries matched in one call (one round trip on a device).
void match_evicted(CachedRowMerges& rows, int layer, std::vector<Matches>& m) {
  std::vector<KeptKeySearch> searches;
  std::vector<size_t> asked;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].evicted.empty()) continue;
    searches.push_back({m[i].head, m[i].kept, m[i].evicted});
    asked.push_back(i);
  }
  if (searches.empty()) return;
  std::vector<std::vector<KeptKeyMatch>> found = rows.nearest_kept_keys(layer, searches);
  if (found.size() != searches.size())
    throw std::logic_error("merge_on_evict: " + std::to_string(found.size()) + " answers for " +
                           std::to_string(searches.size()) + " heads");
  for (size_t k = 0; k < asked.size(); ++k) {
    Matches& mk = m[asked[k]];
    if (found[k].size() != mk.evicted.size())
      throw std::logic_error("merge_on_evict: " + std::to_string(found[k].size()) + " matches for " +
                             std::to_string(mk.evicted.size()) + " evicted entries");
    mk.match = std::move(found[k]);
  }
}

// Nearest's weights read |v_e| and |v_target| of the merged entries: one value_norms call for all of
// them (evicted e's norm at [2i], its target's at [2i + 1], for the i-th entry at or above the
// threshold). Empty for the other methods.
std::vector<double> nearest_value_norms(MergeMethod method, double threshold, CachedRowMerges& rows, int layer,
                                        int head, std::span<const int> kept, const Matches& m) {
  if (method != MergeMethod::Nearest) return {};
  std::vector<int> listed;
  for (size_t e = 0; e < m.evicted.size(); ++e) {
    if (!(m.match[e].cosine >= threshold)) continue;
    listed.push_back(m.evicted[e]);
    listed.push_back(kept[static_cast<size_t>(m.match[e].kept)]);
  }
  if (listed.empty()) return {};
  std::vector<double> norms = rows.value_norms(layer, head, listed);
  if (norms.size() != listed.size())
    throw std::logic_error("merge_on_evict: " + std::to_string(norms.size()) + " value norms for " +
                           std::to_string(listed.size()) + " rows");
  return norms;
}

// The folds of every evicted entry whose match reaches `threshold` into its target, per method
// (merge_on_evict.h), terms in cache order per target; `merged` counts those entries.
RowFolds plan_folds(MergeMethod method, double threshold, std::span<const double> value_norms,
                    std::span<const int> kept, const Matches& m, int64_t& merged) {
  struct Target {
    std::vector<RowFoldTerm> terms;
    double weight = 0;  // sum of w_e
  };
  std::vector<int> slot(kept.size(), -1);
  std::vector<int> order;  // kept positions in order of their first contribution
  std::vector<Target> targets;
  merged = 0;
  for (size_t e = 0; e < m.evicted.size(); ++e) {
    const double s = m.match[e].cosine;
    if (!(s >= threshold)) continue;
    ++merged;
    const int j = m.match[e].kept;
    double w = 1.0;
    switch (method) {
      case MergeMethod::Nearest: {  // the merged entries' norms in order (nearest_value_norms)
        const double nv = value_norms[2 * static_cast<size_t>(merged - 1)];
        const double nt = value_norms[2 * static_cast<size_t>(merged - 1) + 1];
        w = std::max(s, 0.0) * nv / (nv + nt + kMergeNormEps);
        break;
      }
      case MergeMethod::Weighted: w = std::max((s + 1.0) / 2.0, 1e-6); break;
      case MergeMethod::D2o: w = s; break;
      case MergeMethod::Pivot: w = 0.5; break;  // x_j <- (x_j + sum (x_e + x_j) / 2) / (1 + n)
      default: throw std::logic_error("merge_on_evict: no folds for merge.method " + std::string(mode_name(method)));
    }
    if (slot[j] < 0) {
      slot[j] = static_cast<int>(targets.size());
      targets.emplace_back();
      order.push_back(j);
    }
    Target& t = targets[static_cast<size_t>(slot[j])];
    t.terms.push_back({m.evicted[e], w});
    t.weight += w;
  }
  RowFolds folds;
  folds.values = true;
  folds.keys = method != MergeMethod::Nearest;
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    const double n = static_cast<double>(t.terms.size());
    // kvpress: only rows that received a contribution change (D2O and Pivot: every merged entry counts)
    const bool counted = method == MergeMethod::D2o || method == MergeMethod::Pivot;
    if (counted ? t.terms.empty() : !(t.weight > 0)) continue;
    RowFold f;
    f.target = kept[static_cast<size_t>(order[i])];
    f.first_term = static_cast<int32_t>(folds.terms.size());
    f.terms = static_cast<int32_t>(t.terms.size());
    f.self_weight = method == MergeMethod::Pivot ? 1.0 + 0.5 * n : 1.0;
    f.divisor = counted ? 1.0 + n : 1.0 + t.weight;
    folds.folds.push_back(f);
    folds.terms.insert(folds.terms.end(), t.terms.begin(), t.terms.end());
  }
  return folds;
}

// The flags of `kept` over the head's T entries; throws on a bad call (merge_on_evict.h).
std::vector<char> kept_flags(const KVCache& cache, int layer, int head, std::span<const int> kept) {
  if (cache.is_codebook(layer, head))
    throw std::logic_error("merge_on_evict: layer " + std::to_string(layer) + " head " + std::to_string(head) +
                           " is codebook-backed");
  const int T = cache.length(layer, head);
  std::vector<char> is_kept(T, 0);
  for (const int i : kept) {
    if (i < 0 || i >= T) throw std::invalid_argument("merge_on_evict: index " + std::to_string(i) + " out of range");
    if (is_kept[i]) throw std::invalid_argument("merge_on_evict: duplicate index " + std::to_string(i));
    is_kept[i] = 1;
  }
  return is_kept;
}

}  // namespace

MergeOnEvictCounts merge_on_evict(const PolicyMerge& merge, KVCache& cache, int layer, int head,
                                  std::span<const int> kept, const MergeContext& context, CachedRowMerges* rows) {
  const MergeMethod method = merge.method;
  if (method != MergeMethod::Nearest && method != MergeMethod::Pivot && method != MergeMethod::Weighted &&
      method != MergeMethod::Cam)
    throw std::logic_error("merge_on_evict: merge.method " + std::string(mode_name(method)) + " is not a per-head merge-on-evict rule");
  HostRowMerges host(cache);
  CachedRowMerges& where = rows ? *rows : host;
  const std::vector<char> is_kept = kept_flags(cache, layer, head, kept);
  if (method == MergeMethod::Cam) return merge_cam(merge, cache, layer, head, kept, is_kept, context, where);
  MergeOnEvictCounts counts;
  counts.evicted = static_cast<int64_t>(is_kept.size() - kept.size());
  std::vector<Matches> one{{head, kept, evicted_of(is_kept, kept.size()), {}}};
  match_evicted(where, layer, one);
  const Matches& m = one[0];
  const std::vector<double> norms = nearest_value_norms(method, merge.similarity_threshold, where, layer, head, kept, m);
  const RowFolds folds = plan_folds(method, merge.similarity_threshold, norms, kept, m, counts.merged);
  if (!folds.folds.empty()) where.fold_rows(layer, head, folds);
  return counts;
}

MergeOnEvictCounts merge_on_evict_layer(const PolicyMerge& merge, KVCache& cache, int layer,
                                        const std::vector<std::vector<int>>& kept, D2oThreshold& threshold,
                                        CachedRowMerges* rows) {
  if (merge.method != MergeMethod::D2o)
    throw std::logic_error("merge_on_evict_layer: merge.method " + std::string(mode_name(merge.method)) +
                           " is not a layer-level rule");
  if (static_cast<int>(kept.size()) != cache.n_stored_heads())
    throw std::invalid_argument("merge_on_evict_layer: " + std::to_string(kept.size()) + " kept sets for " +
                                std::to_string(cache.n_stored_heads()) + " stored heads");
  HostRowMerges host(cache);
  CachedRowMerges& where = rows ? *rows : host;
  MergeOnEvictCounts counts;
  std::vector<Matches> heads;
  for (size_t h = 0; h < kept.size(); ++h) {
    const std::vector<char> is_kept = kept_flags(cache, layer, static_cast<int>(h), kept[h]);
    counts.evicted += static_cast<int64_t>(is_kept.size() - kept[h].size());
    heads.push_back({static_cast<int>(h), kept[h], evicted_of(is_kept, kept[h].size()), {}});
  }
  match_evicted(where, layer, heads);  // every head in one call
  double sum = 0;
  size_t n = 0;
  for (const Matches& m : heads) {
    for (const KeptKeyMatch& k : m.match) sum += k.cosine;
    n += m.match.size();
  }
  if (n == 0) return counts;  // nothing to merge: the threshold stays as it was
  const double mean = sum / static_cast<double>(n);
  threshold.value = threshold.set ? merge.ema_alpha * threshold.value + merge.ema_beta * mean : mean;
  threshold.set = true;
  for (size_t h = 0; h < kept.size(); ++h) {
    int64_t merged = 0;
    const RowFolds folds = plan_folds(MergeMethod::D2o, threshold.value, {}, kept[h], heads[h], merged);
    counts.merged += merged;
    if (!folds.folds.empty()) where.fold_rows(layer, static_cast<int>(h), folds);
  }
  return counts;
}

}  // namespace kvevict
