// Planning of the accumulated attention's rebuild; contract in accumulated_rebuild.h.
#include "core/engine/accumulated_rebuild.h"

#include <stdexcept>
#include <string>

namespace kvevict {

AccumulatedRebuildPlan plan_accumulated_rebuild(std::span<const AccumulatedHeadBook> book,
                                                std::span<const int64_t> lengths, int group) {
  if (lengths.size() != book.size())
    throw std::logic_error("accumulated attention: " + std::to_string(lengths.size()) + " lengths for " +
                           std::to_string(book.size()) + " heads");
  if (group < 1) throw std::logic_error("accumulated attention: group " + std::to_string(group));
  AccumulatedRebuildPlan plan;
  plan.heads.resize(book.size());
  int64_t offset = 0;
  for (size_t h = 0; h < book.size(); ++h) {
    const AccumulatedHeadBook& b = book[h];
    AccumulatedHeadRebuild& r = plan.heads[h];
    r.old_offset = b.offset;
    r.old_length = b.held_length;
    r.map_length = b.mapped ? static_cast<int64_t>(b.map.size()) : b.held_length;
    if (lengths[h] < r.map_length)
      throw std::logic_error("accumulated attention: head " + std::to_string(h) + " has " +
                             std::to_string(lengths[h]) + " entries, fewer than the " + std::to_string(r.map_length) +
                             " it holds, with no keep to explain it");
    if (b.mapped) {
      r.map_offset = static_cast<int64_t>(plan.map.size());
      plan.map.insert(plan.map.end(), b.map.begin(), b.map.end());
    }
    r.new_offset = offset;
    r.new_length = lengths[h];
    offset += r.new_length * group;
  }
  plan.total = static_cast<size_t>(offset);
  return plan;
}

void compose_accumulated_keep(AccumulatedHeadBook& head, std::span<const int> kept, int64_t length) {
  const int64_t gives = head.mapped ? static_cast<int64_t>(head.map.size()) : head.held_length;
  if (length < gives)
    throw std::logic_error("accumulated attention: a keep over " + std::to_string(length) +
                           " entries of a head that gives " + std::to_string(gives));
  std::vector<int32_t> map(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    const int k = kept[i];
    if (k < 0 || k >= length)
      throw std::logic_error("accumulated attention: kept index " + std::to_string(k) + " of " +
                             std::to_string(length) + " entries");
    // An entry past what the head gave was appended since: zero, named by an index past the held ones.
    if (k >= gives) map[i] = static_cast<int32_t>(head.held_length + (k - gives));
    else map[i] = head.mapped ? head.map[k] : k;
  }
  head.map.swap(map);
  head.mapped = true;
}

}  // namespace kvevict
