#include "evals/stats_paired.h"

#include <cmath>
#include <vector>

namespace kvevict::evals {

PairedDifference paired_difference(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  std::vector<double> differences;  // in sample_key order: the map's, so the draws are reproducible
  for (const auto& [key, score] : a) {
    auto other = b.find(key);
    if (other != b.end()) differences.push_back(score - other->second);
  }
  PairedDifference result;
  result.n = static_cast<int64_t>(differences.size());
  if (differences.empty()) {
    result.mean = result.interval.low = result.interval.high = std::nan("");
    return result;
  }
  double sum = 0;
  for (double d : differences) sum += d;
  result.mean = sum / static_cast<double>(differences.size());
  result.interval = bootstrap_mean_interval(differences);
  return result;
}

}  // namespace kvevict::evals
