#pragma once
// What several benchmarks share: where the default model lives, the two clocks they report and the
// process's peak resident memory.
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <string>

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

}  // namespace kvevict::bench
