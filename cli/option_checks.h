#pragma once
// CLI11 checks for numeric options whose values CLI::Range lets through: CLI::Range compares with
// < and >, so NaN passes it (`--temperature nan` used to fail later, exit 1, where `inf` was
// refused, exit 2). Each check refuses the value as a usage error (exit 2) naming the option.
#include <CLI/CLI.hpp>

namespace kvevict::cli {

// A finite number in [lo, hi]; NaN and infinities are refused.
CLI::Validator finite_range(double lo, double hi);

// A thread count by the rule of core/util/thread_count.h (0..the machine's hardware threads).
CLI::Validator thread_count();

}  // namespace kvevict::cli
