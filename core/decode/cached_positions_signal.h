#pragma once
// A layer's cached entries' original positions where a decoder's device cache holds them, handed to
// an observer that scores or selects on that device (ObservationRequest::positions_on_device,
// LayerSignals::cached_positions): the `pos` signal, and random()'s key, of a generated kernel, and
// the positions a device selection ranks ties and protects by, read in place, so no head's positions
// are uploaded for either. Nothing is copied: it describes the cache's own position arena
// (device_kv_view.h).
//
// What it holds: for stored head h of the layer (cache order, the cache as the block's append left
// it, before the observer changes it), entry t's position is data[start[h] + t], t < length[h]: the
// positions the cache holds, which are the host cache's (the mirror keeps them in step), re-assigned
// ones included (an observer that scores original positions apart from the cache's must not read
// these then).
// Lifetime: valid during the observer's after_layer only, and only until the observer changes the
// layer's cache (a keep moves the rows).
#include <cstdint>
#include <vector>

#include "core/decode/device_kv_view.h"

namespace kvevict {

struct CachedPositionsSignal {
  const int32_t* data = nullptr;  // null: not asked for, or no device cache holds them
  bool on_device = false;         // memory of the decoder's CUDA device; host memory otherwise
  std::vector<int64_t> start;     // [stored head] entries from data to the head's first
  std::vector<int64_t> length;    // [stored head] entries

  bool empty() const { return data == nullptr; }
  int n_heads() const { return static_cast<int>(length.size()); }
};

// The positions of `view`'s layer, described where they are; empty when the view has none.
inline CachedPositionsSignal describe_cached_positions(const DeviceKvLayerView& view, bool on_device) {
  CachedPositionsSignal s;
  if (!view.positions) return s;
  s.data = view.positions;
  s.on_device = on_device;
  for (int h = 0; h < view.n_heads; ++h) {
    s.start.push_back(view.base_row[h]);
    s.length.push_back(view.length[h]);
  }
  return s;
}

// Head h's alone, as a one-head description (TOVA's layer-shared selection reads head 0's).
inline CachedPositionsSignal cached_positions_of_head(const CachedPositionsSignal& s, int h) {
  CachedPositionsSignal one;
  one.data = s.data;
  one.on_device = s.on_device;
  one.start = {s.start.at(static_cast<size_t>(h))};
  one.length = {s.length.at(static_cast<size_t>(h))};
  return one;
}

}  // namespace kvevict
