// The kernel plans' shared view checks; contract in device_kv_view_checks.h.
#include "core/decode/device_kv_view_checks.h"

#include <algorithm>
#include <climits>

#include "core/util/error.h"

namespace kvevict {

int64_t check_layer_view_for_kernel(const DeviceKvLayerView& view, int group, int max_head_dim,
                                    const std::string& kernel) {
  const auto refuse = [&](const std::string& what) { throw UsageError(kernel + ": " + what); };
  if (view.head_dim < 1 || view.head_dim > max_head_dim)
    refuse("head_dim " + std::to_string(view.head_dim) + " is outside [1, " + std::to_string(max_head_dim) + "]");
  if (view.n_heads < 1 || view.n_heads > kDeviceKvMaxHeads)
    refuse(std::to_string(view.n_heads) + " stored heads; the kernels take 1 to " + std::to_string(kDeviceKvMaxHeads));
  if (group < 1) refuse("group " + std::to_string(group) + " is below 1");
  const int64_t n_heads = int64_t(view.n_heads) * group;
  if (n_heads > 4096) refuse(std::to_string(n_heads) + " query heads; at most 4096 are supported");
  int64_t longest = 0;
  for (int h = 0; h < view.n_heads; ++h) {
    if (view.length[h] < 0 || view.length[h] > INT_MAX)
      refuse("stored head " + std::to_string(h) + " has length " + std::to_string(view.length[h]));
    longest = std::max(longest, view.length[h]);
  }
  return longest;
}

}  // namespace kvevict
