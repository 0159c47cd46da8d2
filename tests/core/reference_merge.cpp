#include "reference_merge.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvevict::reference {
namespace {

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double a : x) s += a * a;
  return std::sqrt(s);
}

// torch: F.normalize(x, eps=1e-6) and kvpress's x / x.norm().clamp(min=1e-6).
double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s / (std::max(norm(a), 1e-6) * std::max(norm(b), 1e-6));
}

}  // namespace

std::vector<KvEntry> merge_on_evict(MergeMethod method, double threshold, const std::vector<KvEntry>& entries,
                                    const std::vector<int>& kept) {
  const size_t n = entries.size();
  std::vector<bool> is_kept(n, false);
  for (int j : kept) is_kept.at(j) = true;
  // best[e] = (position in kept, cosine) of each evicted e; -1 when not merged.
  std::vector<int> best(n, -1);
  std::vector<double> sim(n, 0.0);
  for (size_t e = 0; e < n; ++e) {
    if (is_kept[e] || kept.empty()) continue;
    int arg = 0;
    double top = cosine(entries[e].k, entries[kept[0]].k);
    for (size_t j = 1; j < kept.size(); ++j) {
      const double c = cosine(entries[e].k, entries[kept[j]].k);
      if (c > top) top = c, arg = static_cast<int>(j);
    }
    if (top >= threshold) best[e] = arg, sim[e] = top;
  }
  std::vector<KvEntry> out;
  for (size_t j = 0; j < kept.size(); ++j) {
    const KvEntry& own = entries[kept[j]];
    std::vector<size_t> group;
    for (size_t e = 0; e < n; ++e)
      if (best[e] == static_cast<int>(j)) group.push_back(e);
    KvEntry r = own;
    const size_t d = own.v.size();
    if (method == MergeMethod::Nearest) {
      // keys untouched; v <- (v + sum w v_e) / (1 + sum w), w = relu(sim) |v_e| / (|v_e| + |v| + 1e-6)
      double wsum = 0;
      std::vector<double> acc(d, 0.0);
      for (size_t e : group) {
        const double ne = norm(entries[e].v);
        const double w = std::max(sim[e], 0.0) * ne / (ne + norm(own.v) + 1e-6);
        wsum += w;
        for (size_t c = 0; c < d; ++c) acc[c] += w * entries[e].v[c];
      }
      if (wsum > 0)
        for (size_t c = 0; c < d; ++c) r.v[c] = (own.v[c] + acc[c]) / (1 + wsum);
    } else if (method == MergeMethod::Pivot) {
      // scatter_reduce(mean, include_self) of the pairwise midpoints (x_e + x_j) / 2
      if (!group.empty())
        for (size_t c = 0; c < d; ++c) {
          double k = own.k[c], v = own.v[c];
          for (size_t e : group) {
            k += (entries[e].k[c] + own.k[c]) / 2;
            v += (entries[e].v[c] + own.v[c]) / 2;
          }
          r.k[c] = k / static_cast<double>(group.size() + 1);
          r.v[c] = v / static_cast<double>(group.size() + 1);
        }
    } else if (method == MergeMethod::Weighted) {
      double wsum = 0;
      std::vector<double> ak(d, 0.0), av(d, 0.0);
      for (size_t e : group) {
        const double w = std::max((sim[e] + 1) / 2, 1e-6);
        wsum += w;
        for (size_t c = 0; c < d; ++c) ak[c] += w * entries[e].k[c], av[c] += w * entries[e].v[c];
      }
      for (size_t c = 0; c < d; ++c) {
        r.k[c] = (own.k[c] + ak[c]) / (1 + wsum);
        r.v[c] = (own.v[c] + av[c]) / (1 + wsum);
      }
    } else {
      throw std::invalid_argument("reference::merge_on_evict: not a merge-on-evict method");
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvevict::reference
