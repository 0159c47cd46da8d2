#pragma once
// The one wall clock of the engine's and the device mirror's time accounting (EvictionReport's
// seconds and phases, DeviceKvMirror::seconds): a scope adds its duration to a running total.
#include <chrono>

namespace kvevict {

// Adds the steady-clock time from its construction to its end to *total and, when `paused` is
// given, takes the same time off *paused: a nested timer that pauses the enclosing one (the
// engine's phases), so that each interval is counted once, by the innermost timer.
class Stopwatch {
 public:
  explicit Stopwatch(double* total, double* paused = nullptr)
      : total_(total), paused_(paused), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    *total_ += s;
    if (paused_) *paused_ -= s;
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double* total_;
  double* paused_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvevict
