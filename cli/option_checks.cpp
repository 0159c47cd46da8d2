#include "cli/option_checks.h"

#include <cmath>
#include <sstream>

#include "core/util/thread_count.h"

namespace kvevict::cli {

CLI::Validator finite_range(double lo, double hi) {
  std::ostringstream range;
  range << "[" << lo << " - " << hi << "]";
  return CLI::Validator(
      [lo, hi, text = range.str()](std::string& value) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(value, v)) return "'" + value + "' is not a number";
        if (!std::isfinite(v)) return "'" + value + "' is not a finite number (expected a value in " + text + ")";
        if (v < lo || v > hi) return "value " + value + " not in range " + text;
        return "";
      },
      "FLOAT in " + range.str(), "FINITE_RANGE");
}

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        long long n = 0;
        if (!CLI::detail::lexical_cast(value, n)) return "'" + value + "' is not a whole number of threads";
        return thread_count_problem(n);
      },
      "0..hardware threads", "THREAD_COUNT");
}

}  // namespace kvevict::cli
