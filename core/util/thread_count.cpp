#include "core/util/thread_count.h"

#include <algorithm>
#include <thread>

#include "core/util/error.h"

namespace kvevict {

int max_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::string thread_count_problem(int64_t threads) {
  const int cap = max_threads();
  if (threads >= 0 && threads <= cap) return "";
  return std::to_string(threads) + " threads asked for; this machine has " + std::to_string(cap) +
         " hardware threads (use 1.." + std::to_string(cap) + ", or 0 for the library default)";
}

void check_thread_count(int64_t threads, const std::string& what) {
  if (std::string problem = thread_count_problem(threads); !problem.empty()) throw UsageError(what + ": " + problem);
}

}  // namespace kvevict
