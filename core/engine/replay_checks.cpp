#include "core/engine/replay_checks.h"

#include <string>

#include "core/engine/replay_pass.h"

namespace kvevict {

bool reads_replay(const PolicyDescription& d) { return d.needs(TensorSignal::ReplayAttention); }

std::vector<SettingError> replay_setting_errors(const PolicyDescription& d) {
  std::vector<SettingError> e;
  const PolicyObserve::Replay& r = d.observe.replay;
  if (reads_replay(d) && !r.enabled)
    e.push_back({"score", "", "A_replay (KVzip's context replay) needs 'observe: {replay: {...}}' ({} for kvpress's defaults)"});
  if (r.enabled && !reads_replay(d))
    e.push_back({"observe", "replay", "'replay' runs a second forward pass for A_replay; no program reads A_replay"});
  if (!r.enabled) return e;
  if (r.chunk < 1 || r.chunk > kMaxReplayChunk)
    e.push_back({"observe", "replay", "'replay.chunk' must be in 1 .. " + std::to_string(kMaxReplayChunk)});
  if (r.previous_tail < 0 || r.previous_tail > r.chunk)
    e.push_back({"observe", "replay", "'replay.previous_tail' must be in 0 .. replay.chunk"});
  if (r.n_sink < 0) e.push_back({"observe", "replay", "'replay.n_sink' must be >= 0"});
  if (!reads_replay(d)) return e;
  const std::string why = "A_replay is computed once after the whole context is prefilled, before any eviction";
  if (d.select.scope != SelectScope::Model && d.select.scope != SelectScope::Layer)
    e.push_back({"select", "scope", "A_replay (KVzip) ranks entries across heads: it needs select.scope model (kvpress's "
                                    "default, one top-k over the whole model) or layer (kvpress's layerwise)"});
  if (d.run.prefill_block > 0) e.push_back({"run", "prefill_block", why + "; it cannot be combined with run.prefill_block"});
  if (d.run.cascading) e.push_back({"run", "cascading", why + "; it cannot be combined with cascading"});
  if (!d.run.at_prefill) e.push_back({"run", "prefill", why + "; it needs run.prefill true"});
  if (d.run.decode_every > 0)
    e.push_back({"run", "decode_every", why + "; decode triggers would read stale replay scores"});
  if (d.select.unfold_gqa) e.push_back({"select", "unfold_gqa", "A_replay cannot be combined with unfold_gqa"});
  if (d.select.layer_allocation != LayerAllocation::Share)
    e.push_back({"select", "layer_allocation", "A_replay cannot be combined with select.layer_allocation"});
  // The channel stage scores after the eviction, when a prompt within the budget has no replay.
  if (d.channels.enabled) e.push_back({"channel_score", "", "A_replay cannot be combined with a channel_score stage"});
  return e;
}

}  // namespace kvevict
