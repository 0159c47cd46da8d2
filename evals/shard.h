#pragma once
// One shard of an eval run: `kvevict eval --shard I/N` runs part I of N of the planned samples, and
// `kvevict merge` joins the N parts into one whole run (evals/results_merge.h).
//
// The spec is "I/N" with a 0-based index: 0 <= I < N, 1 <= N <= kMaxShards. 0-based so that a SLURM
// job array submitted with --array=0-(N-1) passes "$SLURM_ARRAY_TASK_ID/N" unchanged. I and N are
// plain decimal digits (no sign, no spaces); the stored text is canonical ("01/2" is stored "1/2").
//
// The partition is round-robin over the planned order: planned sample p (0-based position in the
// list plan_samples returns) belongs to shard p mod N. Why not a hash of (task, sample key):
//   - the planned order is already deterministic (it depends only on the config and the model's
//     tokenizer, both part of the run's identity: the shards of one config and model plan the same
//     list), so a hash buys no extra stability where it matters;
//   - round-robin gives every shard floor(S/N) or ceil(S/N) samples; a hash leaves small runs
//     lopsided (the 9-sample stories260K smoke set over 2 shards could put 7 in one);
//   - tasks plan their samples by ascending length, so taking every N-th spreads the long (slow)
//     samples evenly over the shards instead of giving one shard all the longest.
// Every sample is in exactly one shard. A shard may be empty (N larger than the number of samples):
// it still records a finished run with no results, so the merge sees every shard and can tell
// "empty" from "missing".
#include <cstddef>
#include <string>
#include <vector>

#include "evals/tasks/sample.h"

namespace kvevict::evals {

struct ShardSpec {
  static constexpr int kMaxShards = 10000;
  int index = 0;  // 0-based
  int count = 1;
  std::string text() const;  // canonical "I/N"
  bool operator==(const ShardSpec& other) const { return index == other.index && count == other.count; }
};

// Parses "I/N". Throws UsageError whose message starts with `option` and the text as given, and
// names the valid range ("--shard '2/2': shard index 2 is out of range: I must be in [0, 2)").
ShardSpec parse_shard(const std::string& text, const std::string& option = "--shard");

// True when planned position `position` belongs to `shard`.
inline bool in_shard(size_t position, const ShardSpec& shard) {
  return position % static_cast<size_t>(shard.count) == static_cast<size_t>(shard.index);
}

// The samples of `planned` that belong to `shard`, in planned order.
std::vector<Sample> shard_samples(const std::vector<Sample>& planned, const ShardSpec& shard);

}  // namespace kvevict::evals
