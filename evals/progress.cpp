#include "evals/progress.h"

#include <unistd.h>

#include <algorithm>

namespace kvevict::evals {

Progress::Mode Progress::detect(bool quiet) {
  if (quiet) return Mode::Quiet;
  return isatty(fileno(stderr)) ? Mode::Bar : Mode::Lines;
}

Progress::Progress(Mode mode, std::string label, int64_t total, int64_t already_done, FILE* out, double plain_interval_s)
    : mode_(mode), label_(std::move(label)), total_(total), done_(already_done), start_done_(already_done), out_(out),
      interval_(plain_interval_s), start_(std::chrono::steady_clock::now()), last_line_(start_) {
  draw(true);
}

std::string Progress::format_duration(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof(text), "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(text, sizeof(text), "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(text, sizeof(text), "%lds", s);
  return text;
}

void Progress::advance(int64_t units) {
  done_ = std::min(total_, done_ + units);
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
  if (mode_ == Mode::Bar) std::fputc('\n', out_);
  std::fflush(out_);
}

void Progress::draw(bool force) {
  if (mode_ == Mode::Quiet) return;
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  int64_t fresh = done_ - start_done_;
  double eta = fresh > 0 ? elapsed / fresh * (total_ - done_) : -1;
  double share = total_ > 0 ? static_cast<double>(done_) / total_ : 1.0;
  if (mode_ == Mode::Bar) {
    const int width = 30;
    int filled = static_cast<int>(share * width);
    std::string bar(filled, '#');
    bar += std::string(width - filled, '.');
    std::fprintf(out_, "\r%s [%s] %lld/%lld  %3.0f%%  elapsed %s  ETA %s   ", label_.c_str(), bar.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), share * 100,
                 format_duration(elapsed).c_str(), done_ == total_ ? "0s" : format_duration(eta).c_str());
    std::fflush(out_);
    return;
  }
  double since = std::chrono::duration<double>(now - last_line_).count();
  if (done_ == last_line_done_) return;
  if (!force && since < interval_ && done_ != total_) return;
  last_line_done_ = done_;
  last_line_ = now;
  std::fprintf(out_, "%s: %lld/%lld results (%.0f%%), elapsed %s, ETA %s\n", label_.c_str(),
               static_cast<long long>(done_), static_cast<long long>(total_), share * 100,
               format_duration(elapsed).c_str(), done_ == total_ ? "0s" : format_duration(eta).c_str());
  std::fflush(out_);
}

}  // namespace kvevict::evals
