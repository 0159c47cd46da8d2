// The keep plan of a layer's score buffer; see score_buffer_keep.h.
#include "core/engine/score_buffer_keep.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvevict {

ScoreKeepPlan plan_score_keep(std::span<const int64_t> laid, const std::vector<std::vector<int>>& kept) {
  if (kept.size() != laid.size())
    throw std::logic_error("score buffer keep: " + std::to_string(kept.size()) + " kept lists for a buffer of " +
                           std::to_string(laid.size()) + " heads");
  ScoreKeepPlan plan;
  int64_t from = 0;
  for (size_t h = 0; h < kept.size(); ++h) {
    // More entries than the head had (an index repeated) would lay a buffer longer than the one the
    // device copies back into.
    if (static_cast<int64_t>(kept[h].size()) > laid[h])
      throw std::logic_error("score buffer keep: head " + std::to_string(h) + " keeps " +
                             std::to_string(kept[h].size()) + " entries of " + std::to_string(laid[h]));
    for (int index : kept[h])
      if (index < 0 || index >= laid[h])
        throw std::logic_error("score buffer keep: head " + std::to_string(h) + " keeps entry " +
                               std::to_string(index) + " of " + std::to_string(laid[h]));
    const int64_t count = static_cast<int64_t>(kept[h].size());
    plan.heads.push_back({from, plan.total, count});
    plan.kept.insert(plan.kept.end(), kept[h].begin(), kept[h].end());
    plan.lengths.push_back(count);
    plan.longest = std::max(plan.longest, count);
    plan.total += count;
    from += laid[h];
  }
  return plan;
}

}  // namespace kvevict
