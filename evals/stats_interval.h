#pragma once
// 95% intervals for a leaderboard cell's mean score (scores 0-100, one per sample).
//
// Wilson score interval when every score is exactly 0 or 100: the results table stores no metric
// kind, so a cell is binary by its values (passkey, kv_retrieval and single-needle scores are; a
// multi-needle or F1 cell with one partial score is not). Otherwise a percentile bootstrap over the
// samples: kBootstrapResamples resamples of size n drawn with the SplitMix64 generator of
// evals/util/rng.h from the fixed seed kBootstrapSeed (integer arithmetic only, so the draws, and
// hence the interval, are identical on every platform), the interval being the 2.5% and 97.5%
// quantiles of the resample means (linear interpolation between order statistics).
#include <cstdint>
#include <vector>

namespace kvevict::evals {

enum class IntervalMethod { None, Wilson, Bootstrap };
const char* interval_method_name(IntervalMethod method);  // "none" | "wilson" | "bootstrap"

struct Interval {
  double low = 0, high = 0;  // NaN when there is no sample
  IntervalMethod method = IntervalMethod::None;
  bool includes(double value) const { return low <= value && value <= high; }
};

constexpr uint64_t kBootstrapSeed = 0x6b76657669637431ULL;  // "kvevict1"
constexpr int kBootstrapResamples = 2000;
constexpr double kZ95 = 1.959963984540054;  // standard normal quantile at 0.975

// Wilson interval of a proportion `successes / n` in [0, 1]; NaN bounds when n == 0.
Interval wilson_interval(int64_t successes, int64_t n, double z = kZ95);
// Percentile bootstrap interval of the mean of `values` at `level`; NaN bounds when empty.
Interval bootstrap_mean_interval(const std::vector<double>& values, uint64_t seed = kBootstrapSeed,
                                 int resamples = kBootstrapResamples, double level = 0.95);
// Quantile q in [0, 1] of sorted values, linear between order statistics (R's type 7).
double sorted_quantile(const std::vector<double>& sorted, double q);

// n, mean and 95% interval of one cell's scores (0-100): Wilson (scaled to 0-100) when every score
// is 0 or 100, else the bootstrap.
struct ScoreSummary {
  int64_t n = 0;
  double mean = 0;
  Interval interval;
};
bool scores_are_binary(const std::vector<double>& scores);
ScoreSummary summarize_scores(const std::vector<double>& scores);

}  // namespace kvevict::evals
