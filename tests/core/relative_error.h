#pragma once
// The tolerance check of the attention-signal tests (segment_attention_block_test.cpp,
// replay_attention_block_test.cpp): the worst ratio of an element's error to its tolerance.
#include <cmath>
#include <string>
#include <vector>

namespace kvevict::test {

// max over elements of |got - want| / (rel * |want| + abs); <= 1 passes. A NaN, or sizes that
// differ, give infinity. `at`, when given, names the worst element.
template <typename Want>
double worst_ratio(const std::vector<float>& got, const std::vector<Want>& want, double rel, double abs,
                   std::string* at = nullptr) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = std::abs(double(got[i]) - double(want[i])) / (rel * std::abs(double(want[i])) + abs);
    if (!(r <= worst)) {
      worst = std::isnan(r) ? INFINITY : r;
      if (at) *at = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
    }
  }
  return worst;
}

}  // namespace kvevict::test
