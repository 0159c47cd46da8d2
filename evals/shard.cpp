#include "evals/shard.h"

#include <cctype>

#include "core/util/error.h"

namespace kvevict::evals {
namespace {

// A run of decimal digits as a non-negative number, or -1 when it is empty, holds anything but
// digits, or exceeds `ceiling` (checked digit by digit, so no length of input can overflow).
long long parse_digits(const std::string& text, long long ceiling) {
  if (text.empty()) return -1;
  long long value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    value = value * 10 + (c - '0');
    if (value > ceiling) return ceiling + 1;
  }
  return value;
}

}  // namespace

std::string ShardSpec::text() const { return std::to_string(index) + "/" + std::to_string(count); }

ShardSpec parse_shard(const std::string& text, const std::string& option) {
  const std::string where = option + " '" + text + "': ";
  const std::string form = "expected I/N: a 0-based shard index I in [0, N) and a shard count N in [1, " +
                           std::to_string(ShardSpec::kMaxShards) + "], e.g. 0/4";
  const size_t slash = text.find('/');
  if (slash == std::string::npos) throw UsageError(where + form);
  const long long count = parse_digits(text.substr(slash + 1), ShardSpec::kMaxShards);
  const long long index = parse_digits(text.substr(0, slash), ShardSpec::kMaxShards);
  if (count < 0 || index < 0) throw UsageError(where + form);
  if (count < 1 || count > ShardSpec::kMaxShards) {
    throw UsageError(where + "shard count " + text.substr(slash + 1) + " is out of range: N must be in [1, " +
                     std::to_string(ShardSpec::kMaxShards) + "]");
  }
  if (index >= count) {
    throw UsageError(where + "shard index " + text.substr(0, slash) + " is out of range: I must be in [0, " +
                     std::to_string(count) + ") (0-based, as SLURM_ARRAY_TASK_ID with --array=0-" +
                     std::to_string(count - 1) + ")");
  }
  ShardSpec spec;
  spec.index = static_cast<int>(index);
  spec.count = static_cast<int>(count);
  return spec;
}

std::vector<Sample> shard_samples(const std::vector<Sample>& planned, const ShardSpec& shard) {
  std::vector<Sample> part;
  for (size_t position = 0; position < planned.size(); ++position) {
    if (in_shard(position, shard)) part.push_back(planned[position]);
  }
  return part;
}

}  // namespace kvevict::evals
