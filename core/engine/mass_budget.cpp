#include "core/engine/mass_budget.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <vector>

#include "core/engine/selection.h"

namespace kvevict {

int mass_count(std::span<const float> scores, std::span<const int32_t> positions, int protect_first,
               int protect_recent, double p) {
  if (scores.size() != positions.size()) throw std::invalid_argument("mass_count: scores/positions size mismatch");
  const int T = static_cast<int>(positions.size());
  std::vector<char> is_prot(T, 0);
  for (int i : protected_indices(positions, protect_first, protect_recent)) is_prot[i] = 1;
  std::vector<double> mass;
  double total = 0;
  for (int i = 0; i < T; ++i) {
    const double s = scores[i];
    if (is_prot[i] || !(s > 0) || !std::isfinite(s)) continue;
    mass.push_back(s);
    total += s;
  }
  if (mass.empty() || !(total > 0)) return 0;
  std::sort(mass.begin(), mass.end(), std::greater<>());
  double sum = 0;
  for (size_t k = 0; k < mass.size(); ++k) {
    sum += mass[k] / total;
    if (sum >= p) return static_cast<int>(k + 1);
  }
  return static_cast<int>(mass.size());
}

}  // namespace kvevict
