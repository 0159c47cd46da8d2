#include "core/engine/head_budgets.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/engine/budget_allocator.h"

namespace kvevict {

HeadMode head_mode_from_value(double v) {
  if (!std::isfinite(v)) return HeadMode::Compressed;
  const double r = std::round(v);
  if (r == 1.0) return HeadMode::Full;
  if (r == 2.0) return HeadMode::Streaming;
  return HeadMode::Compressed;
}

std::vector<int64_t> round_head_counts(const std::vector<double>& counts, const std::vector<int64_t>& length) {
  if (counts.size() != length.size()) throw std::logic_error("round_head_counts: one count per head needed");
  const size_t n = counts.size();
  double sum = 0;
  int64_t held = 0;
  std::vector<int64_t> base(n);
  std::vector<double> frac(n);
  for (size_t h = 0; h < n; ++h) {
    const double c = std::isfinite(counts[h]) && counts[h] > 0 ? std::min(counts[h], 9.0e15) : 0.0;
    sum += c;
    held += std::max<int64_t>(length[h], 0);
    base[h] = static_cast<int64_t>(std::floor(c));
    frac[h] = c - std::floor(c);
  }
  int64_t total = static_cast<int64_t>(std::nearbyint(sum));  // half to even (default rounding mode)
  total = std::max<int64_t>(static_cast<int64_t>(n), std::min(held, total));
  int64_t floors = 0;
  for (int64_t b : base) floors += b;
  const int64_t remainder = total - floors;
  if (remainder > 0) {
    std::vector<size_t> order(n);
    for (size_t h = 0; h < n; ++h) order[h] = h;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
    for (size_t i = 0; i < std::min<size_t>(n, static_cast<size_t>(remainder)); ++i) ++base[order[i]];
  }
  for (size_t h = 0; h < n; ++h) base[h] = length[h] <= 0 ? 0 : std::clamp<int64_t>(base[h], 1, length[h]);
  return base;
}

std::vector<int> split_head_budgets(int layer_budget, const std::vector<HeadPlan>& plans, const std::vector<int>& length,
                                    int protected_count, HeadAllocation allocation) {
  if (plans.size() != length.size()) throw std::logic_error("split_head_budgets: one plan per head needed");
  std::vector<int> out(length.size(), 0);
  std::vector<size_t> compressed;
  std::vector<double> weight;
  std::vector<int64_t> lower, upper;
  for (size_t h = 0; h < length.size(); ++h) {
    const int n = std::max(length[h], 0);
    switch (plans[h].mode) {
      case HeadMode::Full: out[h] = n; break;
      case HeadMode::Streaming: out[h] = std::min(n, std::max(protected_count, 0)); break;
      case HeadMode::Compressed:
        compressed.push_back(h);
        weight.push_back(plans[h].weight);
        lower.push_back(std::min(n, std::max(protected_count, 0)));
        upper.push_back(n);
        break;
    }
  }
  if (compressed.empty()) return out;
  if (allocation == HeadAllocation::Tokens) {
    const std::vector<int64_t> c = round_head_counts(weight, upper);
    for (size_t i = 0; i < compressed.size(); ++i) out[compressed[i]] = static_cast<int>(c[i]);
    return out;
  }
  int64_t held = 0;
  for (int64_t u : upper) held += u;
  const int64_t total = std::min<int64_t>(static_cast<int64_t>(std::max(layer_budget, 0)) * static_cast<int64_t>(compressed.size()), held);
  const std::vector<int64_t> b = allocate_budgets(weight, lower, upper, total);
  for (size_t i = 0; i < compressed.size(); ++i) out[compressed[i]] = static_cast<int>(b[i]);
  return out;
}

}  // namespace kvevict
