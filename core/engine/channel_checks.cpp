#include "core/engine/channel_checks.h"

#include <string>

namespace kvevict {

std::vector<SettingError> channel_setting_errors(const PolicyDescription& d) {
  std::vector<SettingError> out;
  if (!d.channels.enabled) return out;
  const std::string why = "channel_score (key-channel pruning at the end of prefill) ";
  if (!(d.channels.prune >= 0 && d.channels.prune < 1))
    out.push_back({"channels", "prune", "'prune' is the fraction of key channels zeroed, in [0, 1)"});
  if (!d.run.at_prefill) out.push_back({"run", "prefill", why + "needs 'prefill: true'"});
  if (d.select.unfold_gqa) out.push_back({"select", "unfold_gqa", why + "cannot be combined with select.unfold_gqa"});
  if (d.run.reassign_positions)
    out.push_back({"run", "reassign_positions", why + "cannot be combined with run.reassign_positions (re-rotated keys "
                                                      "would mix a zeroed channel with its RoPE pair)"});
  if (d.merge.enabled)
    out.push_back({"merge", "method", why + "cannot be combined with a merge (codebook heads have no dense keys; a "
                                            "merge-on-evict would average zeroed into unpruned keys)"});
  return out;
}

}  // namespace kvevict
