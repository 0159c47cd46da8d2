#pragma once
// The checks every kernel plan over one layer's DeviceKvLayerView makes (ragged attention, window
// attention): head_dim in [1, max_head_dim], 1 to kDeviceKvMaxHeads stored heads, group >= 1, at
// most 4096 query heads (stored heads x group), every head's length in [0, INT_MAX]. Throws
// UsageError("<kernel>: <what>") naming the value; returns the longest head's length.
#include <cstdint>
#include <string>

#include "core/decode/device_kv_view.h"

namespace kvevict {

int64_t check_layer_view_for_kernel(const DeviceKvLayerView& view, int group, int max_head_dim,
                                    const std::string& kernel);

}  // namespace kvevict
