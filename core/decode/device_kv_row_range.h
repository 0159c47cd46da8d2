#pragma once
// The one check of a host read of a device KV head (read_rows, read_positions on the twin and the
// CUDA cache): rows [first_row, first_row + rows) of head `head` of `layer` must lie within the
// head's length. Returns the head's region; std::invalid_argument for a layer outside the cache,
// std::out_of_range (naming `what`) for a head or rows outside it.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_layout.h"

namespace kvevict {

inline const DeviceKvRegion& device_kv_row_range(const DeviceKvLayout& layout, int layer, int head, int64_t first_row,
                                                 int64_t rows, const char* what) {
  const DeviceKvRegion& r = layout.layer(layer).heads.at(static_cast<size_t>(head));
  if (first_row < 0 || rows < 0 || first_row + rows > r.length)
    throw std::out_of_range(std::string("device KV ") + what + ": rows outside the head's length");
  return r;
}

}  // namespace kvevict
