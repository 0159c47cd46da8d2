#pragma once
// Progress of a long run on stderr: a redrawn bar with samples done and ETA when stderr is a
// terminal; otherwise a plain line at most every `plain_interval_s` seconds (and at the end), so CI
// logs stay readable. A quiet Progress prints nothing.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvevict::evals {

class Progress {
 public:
  enum class Mode { Quiet, Bar, Lines };
  // Mode from the environment: Quiet if `quiet`, Bar if stderr is a TTY, else Lines.
  static Mode detect(bool quiet);

  Progress(Mode mode, std::string label, int64_t total, int64_t already_done = 0, FILE* out = stderr,
           double plain_interval_s = 10.0);
  void advance(int64_t units = 1);
  void finish();
  // "3m12s"-style duration.
  static std::string format_duration(double seconds);

 private:
  void draw(bool force);
  Mode mode_;
  std::string label_;
  int64_t total_, done_, start_done_;
  FILE* out_;
  double interval_;
  std::chrono::steady_clock::time_point start_, last_line_;
  bool finished_ = false;
  int64_t last_line_done_ = -1;
};

}  // namespace kvevict::evals
