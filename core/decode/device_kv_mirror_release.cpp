// DeviceKvMirror::release_host_rows: the host's copy of rows the device holds, dropped for an
// observer that will not read it (contract in device_kv_mirror.h).
#include "core/decode/device_kv_mirror.h"

namespace kvevict {

int DeviceKvMirror::release_host_rows() {
  if (appends_ != MirrorAppends::Decoder || cache_.unfolded()) return 0;
  int released = 0;
  for (int l = 0; l < n_layers_; ++l) {
    flush(l);  // pending keeps and resyncs: the device then holds exactly the host's rows
    if (host_lag_[static_cast<size_t>(l)] > 0) continue;  // the host lacks rows: nothing of its own to drop
    for (int h = 0; h < n_heads_; ++h) {
      if (cache_.is_codebook(l, h) || cache_.length(l, h) == 0 || cache_.rows_held_elsewhere(l, h)) continue;
      if (!placeholder_rows(l, h).empty()) continue;  // zero rows there: the host is not the device's copy
      cache_.release_rows(l, h);
      ++released;
    }
  }
  counts_.heads_released += released;
  return released;
}

}  // namespace kvevict
