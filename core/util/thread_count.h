#pragma once
// The one rule for a CPU thread count a user asks for (`--threads` of generate and inspect, the
// `threads` key of an eval config): 0 means the library default; 1..max_threads() is used as
// given; more threads than the machine has are refused up front (exit 2). Without the cap OpenMP
// tries to start them all and a large count ends in a libgomp failure instead of a clear message.
#include <cstdint>
#include <string>

namespace kvevict {

// std::thread::hardware_concurrency(), at least 1 (the standard allows it to report 0).
int max_threads();

// Why `threads` is refused ("1024 threads asked for; this machine has 16 ..."), or "" when it is fine.
std::string thread_count_problem(int64_t threads);

// Throws UsageError "<what>: <problem>" unless 0 <= threads <= max_threads().
void check_thread_count(int64_t threads, const std::string& what);

}  // namespace kvevict
