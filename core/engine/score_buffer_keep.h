#pragma once
// Keeping a layer's score buffer aligned with its cache (LayerSelector::keep_in_buffer): after an
// eviction, head h of the buffer holds its old entries kept[h], in that order (what KVCache::keep
// does to the head's entries), packed one head after another as layer_score_buffer lays them. A
// cascading prompt (CAKE) selects a layer again at every later layer from the scores it was given
// once, so they must follow the cache through each keep.
// Planned once on the host (the checks and the offsets, plan_score_keep); the element body below
// is the one rule that the twin's loop and the CUDA selector's kernel (a thread per kept entry)
// both run.
#include <cstdint>
#include <span>
#include <vector>

#include "core/util/host_device.h"

namespace kvevict {

// One head's move: its kept entries read from `from` onward in the old buffer, written from `to`
// onward in the new one; `count` = kept[h].size().
struct ScoreKeepHead {
  int64_t from = 0;
  int64_t to = 0;
  int64_t count = 0;
};

struct ScoreKeepPlan {
  std::vector<ScoreKeepHead> heads;
  std::vector<int32_t> kept;     // every head's kept indices, head h's from heads[h].to (the new layout)
  std::vector<int64_t> lengths;  // the new head lengths (the kept counts)
  int64_t longest = 0;           // the largest count
  int64_t total = 0;             // the new buffer's floats
};

// The plan for a buffer laid for heads of `laid` entries. std::logic_error when `kept` has another
// head count, more entries than a head had, or an index outside its head (checked here, before any
// device reads it).
ScoreKeepPlan plan_score_keep(std::span<const int64_t> laid, const std::vector<std::vector<int>>& kept);

// New entry i (< head.count) of one head.
KVEVICT_HOST_DEVICE inline void score_keep_element(const float* from, const int32_t* kept, const ScoreKeepHead& head,
                                                   int64_t i, float* to) {
  to[head.to + i] = from[head.from + kept[head.to + i]];
}

}  // namespace kvevict
