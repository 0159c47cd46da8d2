#include "core/engine/merge_on_evict.h"

#include "core/engine/merge_cam.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvevict {
namespace {

constexpr double kNormEps = 1e-6;   // torch normalize eps (KVCache-Factory) and kvpress's _EPS

double dot(const float* a, const float* b, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c) s += static_cast<double>(a[c]) * b[c];
  return s;
}

// The evicted entries of one head: their rows, key norms and best kept match.
struct Evicted {
  std::vector<int> index;           // cache indices, ascending
  std::vector<float> keys, values;  // [E][d]
  std::vector<double> key_norm;     // clamped at kNormEps
  std::vector<double> best_sim;     // cosine with the target
  std::vector<int> target;          // position in `kept` of the target
};

// A float dot product in 8 independent lanes (vectorisable, unlike one ordered sum); only used to
// shortlist candidates, never as the similarity itself.
float dot_lanes(const float* a, const float* b, int d) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int c = 0;
  for (; c + 8 <= d; c += 8)
    for (int k = 0; k < 8; ++k) lane[k] += a[c + k] * b[c + k];
  float s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; c < d; ++c) s += a[c] * b[c];
  return s;
}

// Searches, for every evicted key, the kept key of highest cosine (first in kept order on ties).
// The cosines are computed in double, as the rule states; to make that affordable (E x K x d per
// head) a float pass shortlists, per evicted key, the kept keys within kShortlist of the float
// maximum, and only those are computed in double, in kept order. A float cosine of unit-normalised
// rows is within ~d x 2^-24 of the double one (below 1e-5 for d <= 256), far inside kShortlist, so
// the double maximum is always on the shortlist and the result is the all-double search's.
// Memory: the kept keys once ([K][d] floats) and one row of K float cosines.
constexpr float kShortlist = 1e-3f;

void find_targets(const KVCache& cache, int layer, int head, std::span<const int> kept, Evicted& ev) {
  const int d = cache.head_dim();
  const size_t E = ev.index.size(), K = kept.size();
  ev.best_sim.assign(E, -std::numeric_limits<double>::infinity());
  ev.target.assign(E, 0);
  std::vector<float> keys(K * d), unit(K * d);
  std::vector<double> norm(K);
  for (size_t j = 0; j < K; ++j) {
    float* row = keys.data() + j * d;
    cache.reconstruct_keys(layer, head, kept[j], kept[j] + 1, row);
    norm[j] = std::max(std::sqrt(dot(row, row, d)), kNormEps);
    for (int c = 0; c < d; ++c) unit[j * d + c] = static_cast<float>(row[c] / norm[j]);
  }
  // Evicted entries are independent (each writes its own best_sim / target): split over threads.
#pragma omp parallel for schedule(static) if (E * K * static_cast<size_t>(d) > (size_t{1} << 22))
  for (size_t e = 0; e < E; ++e) {
    thread_local std::vector<float> probe, approx;
    probe.resize(d);
    approx.resize(K);
    const float* ke = ev.keys.data() + e * d;
    for (int c = 0; c < d; ++c) probe[c] = static_cast<float>(ke[c] / ev.key_norm[e]);
    float top = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < K; ++j) {
      approx[j] = dot_lanes(probe.data(), unit.data() + j * d, d);
      if (approx[j] > top) top = approx[j];  // NaN never wins, as in the double search
    }
    for (size_t j = 0; j < K; ++j) {
      if (!(approx[j] >= top - kShortlist)) continue;
      const double s = dot(ke, keys.data() + j * d, d) / (ev.key_norm[e] * norm[j]);
      if (s > ev.best_sim[e]) {
        ev.best_sim[e] = s;
        ev.target[e] = static_cast<int>(j);
      }
    }
  }
}

// One kept entry that receives merges: sums in double over its merged evicted entries.
struct Target {
  int kept_pos = 0;
  std::vector<double> key_sum, value_sum;  // sum of w_e x_e (Pivot: sum of x_e)
  double weight = 0;                       // sum of w_e (Pivot: |M_j|)
  int count = 0;                           // |M_j|
};

// x_j <- merged row, per method (merge_on_evict.h).
void merged_row(MergeMethod method, const Target& t, const std::vector<double>& sum, const float* own, int d,
                std::vector<float>& out) {
  out.resize(d);
  for (int c = 0; c < d; ++c) {
    const double x = own[c];
    const double merged = method == MergeMethod::Pivot ? (x + 0.5 * (sum[c] + t.weight * x)) / (1.0 + t.weight)
                          : method == MergeMethod::D2o ? (x + sum[c]) / (1.0 + t.count)
                                                       : (x + sum[c]) / (1.0 + t.weight);
    out[c] = static_cast<float>(merged);
  }
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

// The evicted entries' rows, key norms and best kept match (nothing when E or kept is empty).
Evicted gather_evicted(const KVCache& cache, int layer, int head, std::span<const int> kept,
                       const std::vector<char>& is_kept) {
  Evicted ev;
  const int d = cache.head_dim();
  for (size_t t = 0; t < is_kept.size(); ++t)
    if (!is_kept[t]) ev.index.push_back(static_cast<int>(t));
  const size_t E = ev.index.size();
  if (E == 0 || kept.empty()) return ev;
  ev.keys.resize(E * d);
  ev.values.resize(E * d);
  ev.key_norm.resize(E);
  for (size_t e = 0; e < E; ++e) {
    cache.reconstruct_keys(layer, head, ev.index[e], ev.index[e] + 1, ev.keys.data() + e * d);
    cache.reconstruct_values(layer, head, ev.index[e], ev.index[e] + 1, ev.values.data() + e * d);
    ev.key_norm[e] = std::max(std::sqrt(dot(ev.keys.data() + e * d, ev.keys.data() + e * d, d)), kNormEps);
  }
  find_targets(cache, layer, head, kept, ev);
  return ev;
}

// Folds every evicted entry of best cosine >= threshold into its target, per method.
int64_t fold_evicted(MergeMethod method, double threshold, KVCache& cache, int layer, int head,
                     std::span<const int> kept, const Evicted& ev) {
  const int d = cache.head_dim();
  const size_t E = ev.best_sim.size();
  int64_t merged = 0;
  // Accumulate into the targets that receive something (at most E of them).
  std::vector<int> slot(kept.size(), -1);
  std::vector<Target> targets;
  std::vector<float> own_key(d), own_value(d);
  const bool keys_merge = method != MergeMethod::Nearest;
  for (size_t e = 0; e < E; ++e) {
    if (!(ev.best_sim[e] >= threshold)) continue;
    ++merged;
    const int j = ev.target[e];
    const float* ve = ev.values.data() + e * d;
    double w = 1.0;
    if (method == MergeMethod::Nearest) {
      cache.reconstruct_values(layer, head, kept[j], kept[j] + 1, own_value.data());
      const double nv = std::sqrt(dot(ve, ve, d)), nt = std::sqrt(dot(own_value.data(), own_value.data(), d));
      w = std::max(ev.best_sim[e], 0.0) * nv / (nv + nt + kNormEps);
    } else if (method == MergeMethod::Weighted) {
      w = std::max((ev.best_sim[e] + 1.0) / 2.0, 1e-6);
    } else if (method == MergeMethod::D2o) {
      w = ev.best_sim[e];
    }
    if (slot[j] < 0) {
      slot[j] = static_cast<int>(targets.size());
      Target t;
      t.kept_pos = j;
      t.value_sum.assign(d, 0.0);
      if (keys_merge) t.key_sum.assign(d, 0.0);
      targets.push_back(std::move(t));
    }
    Target& t = targets[slot[j]];
    t.weight += w;
    ++t.count;
    const float* ke = ev.keys.data() + e * d;
    for (int c = 0; c < d; ++c) {
      t.value_sum[c] += w * ve[c];
      if (keys_merge) t.key_sum[c] += w * ke[c];
    }
  }
  std::vector<float> key_out, value_out;
  for (const Target& t : targets) {
    // kvpress: only rows that received a contribution change (D2O: every merged entry counts)
    if (method == MergeMethod::D2o ? t.count == 0 : !(t.weight > 0)) continue;
    const int idx = kept[t.kept_pos];
    cache.reconstruct_values(layer, head, idx, idx + 1, own_value.data());
    merged_row(method, t, t.value_sum, own_value.data(), d, value_out);
    if (keys_merge) {
      cache.reconstruct_keys(layer, head, idx, idx + 1, own_key.data());
      merged_row(method, t, t.key_sum, own_key.data(), d, key_out);
    }
    cache.write_entry(layer, head, idx, keys_merge ? key_out.data() : nullptr, value_out.data());
  }
  return merged;
}

}  // namespace

MergeOnEvictCounts merge_on_evict(const PolicyMerge& merge, KVCache& cache, int layer, int head,
                                  std::span<const int> kept, const MergeContext& context) {
  const MergeMethod method = merge.method;
  if (method != MergeMethod::Nearest && method != MergeMethod::Pivot && method != MergeMethod::Weighted &&
      method != MergeMethod::Cam)
    throw std::logic_error("merge_on_evict: merge.method " + std::string(mode_name(method)) + " is not a per-head merge-on-evict rule");
  const std::vector<char> is_kept = kept_flags(cache, layer, head, kept);
  if (method == MergeMethod::Cam) return merge_cam(merge, cache, layer, head, kept, is_kept, context);
  MergeOnEvictCounts counts;
  counts.evicted = static_cast<int64_t>(is_kept.size() - kept.size());
  const Evicted ev = gather_evicted(cache, layer, head, kept, is_kept);
  counts.merged = fold_evicted(method, merge.similarity_threshold, cache, layer, head, kept, ev);
  return counts;
}

MergeOnEvictCounts merge_on_evict_layer(const PolicyMerge& merge, KVCache& cache, int layer,
                                        const std::vector<std::vector<int>>& kept, D2oThreshold& threshold) {
  if (merge.method != MergeMethod::D2o)
    throw std::logic_error("merge_on_evict_layer: merge.method " + std::string(mode_name(merge.method)) +
                           " is not a layer-level rule");
  if (static_cast<int>(kept.size()) != cache.n_stored_heads())
    throw std::invalid_argument("merge_on_evict_layer: " + std::to_string(kept.size()) + " kept sets for " +
                                std::to_string(cache.n_stored_heads()) + " stored heads");
  MergeOnEvictCounts counts;
  std::vector<Evicted> heads(kept.size());
  double sum = 0;
  size_t n = 0;
  for (size_t h = 0; h < kept.size(); ++h) {
    const std::vector<char> is_kept = kept_flags(cache, layer, static_cast<int>(h), kept[h]);
    counts.evicted += static_cast<int64_t>(is_kept.size() - kept[h].size());
    heads[h] = gather_evicted(cache, layer, static_cast<int>(h), kept[h], is_kept);
    for (const double s : heads[h].best_sim) sum += s;
    n += heads[h].best_sim.size();
  }
  if (n == 0) return counts;  // nothing to merge: the threshold stays as it was
  const double mean = sum / static_cast<double>(n);
  threshold.value = threshold.set ? merge.ema_alpha * threshold.value + merge.ema_beta * mean : mean;
  threshold.set = true;
  for (size_t h = 0; h < kept.size(); ++h)
    counts.merged += fold_evicted(MergeMethod::D2o, threshold.value, cache, layer, static_cast<int>(h), kept[h], heads[h]);
  return counts;
}

}  // namespace kvevict
