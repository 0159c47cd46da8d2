#pragma once
// A kept list: the cache indices of a head's survivors, in the order they are kept (KVCache::keep,
// a device compaction's plan, the engine's per-entry state). Checked once, where the cache is
// edited; described by two facts every consumer uses: the prefix of entries kept in their own slot
// (compaction moves nothing there: a decode step that evicts near the newest entries leaves most of
// a head in it) and whether the list ascends (then it applies in place, front to back, since
// entry i comes from a slot >= i).
#include <cstddef>
#include <cstdint>
#include <span>

namespace kvevict {

struct KeptListShape {
  size_t in_place = 0;    // kept[i] == i for every i < in_place
  bool ascending = true;  // kept[i - 1] < kept[i] for every i
};

// The shape of a list already checked (or built to be valid). O(size).
KeptListShape kept_list_shape(std::span<const int> kept);

// The shape of `kept` over a head of `length` entries, and the first fault in list order: an index
// outside [0, length) or one kept twice (then `fault` says which and `index` is it; the shape is
// not to be used). O(size), with a mark per entry after the in-place prefix only.
struct KeptListCheck {
  enum class Fault : uint8_t { None, OutOfRange, Twice };
  KeptListShape shape;
  Fault fault = Fault::None;
  int index = 0;
};
KeptListCheck check_kept_list(std::span<const int> kept, int64_t length);

}  // namespace kvevict
