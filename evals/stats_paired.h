#pragma once
// Paired differences: two sets of per-sample scores keyed by sample_key, compared only on the keys
// both hold (a - b per sample), with the percentile bootstrap interval of the mean difference
// (evals/stats_interval.h: fixed seed, 2000 resamples). Pairing removes the between-sample variance
// that two independent intervals would carry: the same hard sample is hard for both.
#include <cstdint>
#include <map>
#include <string>

#include "evals/stats_interval.h"

namespace kvevict::evals {

struct PairedDifference {
  int64_t n = 0;       // shared samples; 0 = nothing to compare (mean and bounds NaN)
  double mean = 0;     // mean of (a - b)
  Interval interval;   // 95% bootstrap interval of the mean difference
  // The interval excludes zero: a difference the samples support.
  bool significant() const { return n > 0 && !interval.includes(0.0); }
};

PairedDifference paired_difference(const std::map<std::string, double>& a, const std::map<std::string, double>& b);

}  // namespace kvevict::evals
