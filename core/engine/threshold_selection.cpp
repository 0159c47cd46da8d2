#include "core/engine/threshold_selection.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "core/engine/selection.h"

namespace kvevict {

int threshold_budget(std::span<const float> scores, std::span<const int32_t> positions, int cap, int protect_first,
                     int protect_recent, double threshold) {
  if (scores.size() != positions.size()) throw std::invalid_argument("threshold_budget: scores/positions size mismatch");
  const int T = static_cast<int>(positions.size());
  const std::vector<int> prot = protected_indices(positions, protect_first, protect_recent);
  std::vector<char> is_prot(T, 0);
  for (int i : prot) is_prot[i] = 1;
  int passing = 0;
  for (int i = 0; i < T; ++i)
    if (!is_prot[i] && static_cast<double>(scores[i]) >= threshold) ++passing;  // false for NaN
  return std::clamp(static_cast<int>(prot.size()) + passing, 0, std::max(0, cap));
}

}  // namespace kvevict
