#include "core/engine/staged_selection.h"

#include <algorithm>
#include <cmath>

namespace kvevict {

int stage_keep_count(int length, double keep, int budget, bool last) {
  // The DSL evaluates settings in float32 (0.7 arrives as 0.69999999); rounding to 6 decimals
  // recovers the decimal the file wrote, so the product is the double one kvpress takes.
  const double k = std::round(std::min(keep, 1.0) * 1e6) / 1e6;
  const double want = keep > 0 ? std::floor(k * length) : static_cast<double>(budget);
  const double capped = last ? std::min(want, static_cast<double>(budget)) : want;
  return std::clamp(static_cast<int>(std::min(capped, 1e9)), 0, std::max(0, length));
}

}  // namespace kvevict
