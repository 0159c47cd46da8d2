#include "core/engine/merge_checks.h"

namespace kvevict {

std::vector<SettingError> merge_setting_errors(const PolicyDescription& d) {
  std::vector<SettingError> out;
  if (!d.merge.enabled || d.merge.method != MergeMethod::Cam) return out;
  if (d.run.at_prefill)
    out.push_back({"run", "prefill", "merge.method cam merges at decode-time evictions only (its gate reads the attention "
                                     "of the decode steps); set 'prefill: false'"});
  if (d.run.decode_every <= 0)
    out.push_back({"run", "decode_every", "merge.method cam merges at decode-time evictions only; set 'decode_every: N'"});
  if (d.merge.merge_budget < 1) out.push_back({"merge", "merge_budget", "'merge_budget' must be >= 1"});
  return out;
}

}  // namespace kvevict
