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

std::vector<int> split_head_budgets(int layer_budget, const std::vector<HeadPlan>& plans, const std::vector<int>& length,
                                    int protected_count) {
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
  int64_t held = 0;
  for (int64_t u : upper) held += u;
  const int64_t total = std::min<int64_t>(static_cast<int64_t>(std::max(layer_budget, 0)) * static_cast<int64_t>(compressed.size()), held);
  const std::vector<int64_t> b = allocate_budgets(weight, lower, upper, total);
  for (size_t i = 0; i < compressed.size(); ++i) out[compressed[i]] = static_cast<int>(b[i]);
  return out;
}

}  // namespace kvevict
