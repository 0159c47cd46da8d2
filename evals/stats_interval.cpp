#include "evals/stats_interval.h"

#include <algorithm>
#include <cmath>

#include "evals/util/rng.h"

namespace kvevict::evals {

const char* interval_method_name(IntervalMethod method) {
  switch (method) {
    case IntervalMethod::Wilson: return "wilson";
    case IntervalMethod::Bootstrap: return "bootstrap";
    case IntervalMethod::None: break;
  }
  return "none";
}

Interval wilson_interval(int64_t successes, int64_t n, double z) {
  Interval interval;
  interval.method = IntervalMethod::Wilson;
  if (n <= 0) {
    interval.low = interval.high = std::nan("");
    return interval;
  }
  const double count = static_cast<double>(n);
  const double p = static_cast<double>(successes) / count;
  const double z2 = z * z;
  const double denominator = 1 + z2 / count;
  const double centre = (p + z2 / (2 * count)) / denominator;
  const double half = z * std::sqrt(p * (1 - p) / count + z2 / (4 * count * count)) / denominator;
  interval.low = std::max(0.0, centre - half);
  interval.high = std::min(1.0, centre + half);
  return interval;
}

double sorted_quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return std::nan("");
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(at));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double t = at - static_cast<double>(below);
  return sorted[below] + t * (sorted[above] - sorted[below]);
}

Interval bootstrap_mean_interval(const std::vector<double>& values, uint64_t seed, int resamples, double level) {
  Interval interval;
  interval.method = IntervalMethod::Bootstrap;
  if (values.empty() || resamples <= 0) {
    interval.low = interval.high = std::nan("");
    return interval;
  }
  Rng rng(seed);
  const uint64_t n = values.size();
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& mean : means) {
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) sum += values[rng.below(n)];
    mean = sum / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  const double tail = (1 - level) / 2;
  interval.low = sorted_quantile(means, tail);
  interval.high = sorted_quantile(means, 1 - tail);
  return interval;
}

bool scores_are_binary(const std::vector<double>& scores) {
  return std::all_of(scores.begin(), scores.end(), [](double s) { return s == 0.0 || s == 100.0; });
}

ScoreSummary summarize_scores(const std::vector<double>& scores) {
  ScoreSummary summary;
  summary.n = static_cast<int64_t>(scores.size());
  if (scores.empty()) {
    summary.mean = std::nan("");
    summary.interval.low = summary.interval.high = std::nan("");
    return summary;
  }
  double sum = 0;
  for (double s : scores) sum += s;
  summary.mean = sum / static_cast<double>(scores.size());
  if (scores_are_binary(scores)) {
    const auto successes = std::count(scores.begin(), scores.end(), 100.0);
    summary.interval = wilson_interval(successes, summary.n);
    summary.interval.low *= 100;
    summary.interval.high *= 100;
  } else {
    summary.interval = bootstrap_mean_interval(scores);
  }
  return summary;
}

}  // namespace kvevict::evals
