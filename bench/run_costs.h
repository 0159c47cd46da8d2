#pragma once
// bench_gpu_decode's estimate of a run's cost from the runs measured before it, so that a device
// check skips what would not fit its time instead of being cut in the middle of a run.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace kvevict::bench {

// What the runs of one sweep cost, for the estimate of the next: a run's estimate is the same
// policy's cost at the measured context nearest to it (by ratio), scaled by the context ratio
// (linearly for a synthetic fill, by Bench::prefill_exponent for a prefill); without one, the
// largest cost of any policy at that nearest context, scaled the same way; without any run, none.
// Per policy because a policy's run is not the full cache's: a 3% synthetic fill at 128K costs a
// few seconds where the full one costs tens (the first device runs estimated every policy at the
// largest cost of its context, and skipped the 3% rows whenever full's did not leave that much).
class RunCosts {
 public:
  explicit RunCosts(double exponent) : exponent_(exponent) {}
  void add(int context, const std::string& policy, double seconds) { costs_.push_back({context, policy, seconds}); }
  std::optional<double> estimate(int context, const std::string& policy) const {
    const Cost* nearest = nullptr;
    double nearest_distance = 0;
    for (const bool same_policy : {true, false}) {
      for (const Cost& c : costs_) {
        if (same_policy && c.policy != policy) continue;
        const double distance = std::abs(std::log(static_cast<double>(context) / c.context));
        if (!nearest || distance < nearest_distance ||
            (distance == nearest_distance && c.context == nearest->context && c.seconds > nearest->seconds)) {
          nearest = &c;
          nearest_distance = distance;
        }
      }
      if (nearest) break;
    }
    if (!nearest) return std::nullopt;
    return nearest->seconds * std::pow(static_cast<double>(context) / nearest->context, exponent_);
  }

 private:
  struct Cost {
    int context;
    std::string policy;
    double seconds;
  };
  double exponent_;
  std::vector<Cost> costs_;
};

}  // namespace kvevict::bench
