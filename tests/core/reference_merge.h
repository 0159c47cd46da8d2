#pragma once
// An independent reference for merge-on-evict (core/engine/merge_on_evict.h), written in double
// from the methods' formulas (kvpress MergingPress.merge; KVCache-Factory merge_kv "pivot" and
// "weighted"), in gather form: for each kept entry, the evicted entries whose best match it is,
// then the method's average. It shares no code with the engine.
#include <vector>

#include "core/engine/policy_modes.h"

namespace kvevict::reference {

struct KvEntry {
  std::vector<double> k, v;  // post-RoPE key and value as cached
};

// The merged entries of `kept` (indices into `entries`, in cache order after compaction: ties of
// the best cosine go to the first of them), in that order. `threshold`: an evicted entry merges
// only when its best cosine is >= threshold. `method` is Nearest, Pivot or Weighted.
std::vector<KvEntry> merge_on_evict(MergeMethod method, double threshold, const std::vector<KvEntry>& entries,
                                    const std::vector<int>& kept);

}  // namespace kvevict::reference
