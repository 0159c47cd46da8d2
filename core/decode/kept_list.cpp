#include "core/decode/kept_list.h"

#include <vector>

namespace kvevict {
namespace {

// kept[i] == i for i below the result (and below `length`: an index there is in range).
size_t in_place_prefix(std::span<const int> kept, int64_t length) {
  size_t p = 0;
  while (p < kept.size() && static_cast<int64_t>(p) < length && kept[p] == static_cast<int>(p)) ++p;
  return p;
}

}  // namespace

KeptListShape kept_list_shape(std::span<const int> kept) {
  KeptListShape s;
  s.in_place = in_place_prefix(kept, static_cast<int64_t>(kept.size()));
  for (size_t i = s.in_place > 0 ? s.in_place : 1; i < kept.size() && s.ascending; ++i)
    s.ascending = kept[i - 1] < kept[i];
  return s;
}

KeptListCheck check_kept_list(std::span<const int> kept, int64_t length) {
  KeptListCheck c;
  const size_t p = in_place_prefix(kept, length);
  c.shape.in_place = p;
  // The prefix holds 0..p-1 once each: a later index below p is one of them kept twice.
  std::vector<char> seen(static_cast<size_t>(length > static_cast<int64_t>(p) ? length - static_cast<int64_t>(p) : 0), 0);
  for (size_t i = p; i < kept.size(); ++i) {
    const int idx = kept[i];
    if (idx < 0 || idx >= length) {
      c.fault = KeptListCheck::Fault::OutOfRange;
      c.index = idx;
      return c;
    }
    if (static_cast<size_t>(idx) < p || seen[static_cast<size_t>(idx) - p]) {
      c.fault = KeptListCheck::Fault::Twice;
      c.index = idx;
      return c;
    }
    seen[static_cast<size_t>(idx) - p] = 1;
    if (i > 0 && idx < kept[i - 1]) c.shape.ascending = false;
  }
  return c;
}

}  // namespace kvevict
