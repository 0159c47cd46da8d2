#pragma once
// What several benchmarks share: where the default model lives, the two clocks they report and the
// process's peak resident memory, and numeric options parsed strictly.
#include <sys/resource.h>
#include <time.h>

#include <charconv>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "core/util/error.h"

namespace kvevict::bench {

// SmolLM2-135M-Instruct Q4_1 as scripts/fetch-smollm2.sh caches it (${KVEVICT_MODEL_DIR:-~/.cache/kvevict/models}).
inline std::string default_smollm2_path() {
  const char* dir = std::getenv("KVEVICT_MODEL_DIR");
  const char* home = std::getenv("HOME");
  return std::string(dir ? dir : std::string(home ? home : "") + "/.cache/kvevict/models") +
         "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Monotonic wall-clock seconds.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the whole process (all threads): the steadier figure on a shared machine.
inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The process's peak resident set so far (getrusage's ru_maxrss, KiB on Linux), in MiB.
inline double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// The bytes of a model's weight files: a file's size, or for a Hugging Face folder the sum of its
// *.safetensors shards; nullopt for anything else (a synthetic spec).
inline std::optional<uint64_t> weight_file_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::file_size(path, ec);
  if (!fs::is_directory(path, ec)) return std::nullopt;
  uint64_t total = 0;
  bool any = false;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".safetensors") {
      total += entry.file_size(ec);
      any = true;
    }
  return any ? std::optional<uint64_t>(total) : std::nullopt;
}

// `text` as a whole number / a finite number, or UsageError naming the option (exit 2).
inline int parse_int_option(const std::string& option, const std::string& text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw UsageError(option + ": '" + text + "' is not a whole number");
  return v;
}
inline double parse_double_option(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw UsageError(option + ": '" + text + "' is not a number");
  return v;
}

}  // namespace kvevict::bench
