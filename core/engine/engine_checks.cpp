#include "core/engine/engine_checks.h"

#include "core/engine/channel_checks.h"
#include "core/engine/codebook_stage.h"
#include "core/engine/merge_checks.h"
#include "core/engine/query_checks.h"
#include "core/engine/replay_checks.h"
#include "core/engine/segment_checks.h"
#include "core/engine/selection_checks.h"
#include "core/util/error.h"

namespace kvevict {

void check_engine_supports(const PolicyDescription& desc, const ModelConfig& config, const Budget& budget) {
  if (desc.select.random_share < 0 || desc.select.random_share > 1)
    throw UsageError("policy " + desc.name + ": random_share must be in [0, 1]");
  if (desc.select.random_share > 0 && !(desc.select.temperature > 0))
    throw UsageError("policy " + desc.name + ": temperature must be > 0");
  if (desc.window < 0 || desc.protect.first < 0 || desc.protect.recent < 0 || desc.run.decode_every < 0 ||
      desc.run.decode_slack < 0)
    throw UsageError("policy " + desc.name + ": window, protect, decode_every and decode_slack must be >= 0");
  if (desc.observe.same_index_head &&
      (desc.needs(TensorSignal::AccumulatedAttention) || desc.needs(TensorSignal::CurrentAttention)))
    throw UsageError("policy " + desc.name + ": observe.same_index_head changes the query heads of A only; the policy "
                     "must not also read A_acc or A_now");
  if (desc.observe.same_index_head && desc.run.reassign_positions)  // it masks by the cache's own positions
    throw UsageError("policy " + desc.name + ": observe.same_index_head cannot be combined with run.reassign_positions");
  const bool unfold = desc.select.unfold_gqa;
  if (unfold && (desc.select.scope != SelectScope::KvHead || desc.run.cascading))
    throw UsageError("policy " + desc.name + ": unfold_gqa needs select scope kv_head and no cascading");
  if (desc.merge.enabled && desc.merge.method != MergeMethod::Codebook && unfold)
    throw UsageError("policy " + desc.name + ": merge.method " + std::string(mode_name(desc.merge.method)) +
                     " cannot be combined with unfold_gqa");
  if (desc.merge.enabled && desc.merge.method == MergeMethod::Codebook) {
    int first = 0, last = 0;
    codebook_layer_range(desc.merge, config.n_layers, desc.name, first, last);
  }
  if (desc.run.prefill_block > 0 && (desc.run.cascading || unfold || !desc.run.at_prefill))
    throw UsageError("policy " + desc.name + ": run.prefill_block (a prefill in blocks) needs run.prefill true and "
                     "cannot be combined with cascading or unfold_gqa");
  if (unfold && desc.run.reassign_positions)
    throw UsageError("policy " + desc.name + ": run.reassign_positions cannot be combined with unfold_gqa");
  if (unfold && desc.observe.same_index_head)
    throw UsageError("policy " + desc.name + ": observe.same_index_head cannot be combined with unfold_gqa");
  if (const auto errors = segment_setting_errors(desc); !errors.empty())
    throw UsageError("policy " + desc.name + ": " + errors.front().message);
  if (const auto errors = merge_setting_errors(desc); !errors.empty())
    throw UsageError("policy " + desc.name + ": " + errors.front().message);
  if (const auto errors = query_setting_errors(desc); !errors.empty())
    throw UsageError("policy " + desc.name + ": " + errors.front().message);
  if (const auto errors = selection_setting_errors(desc); !errors.empty())
    throw UsageError("policy " + desc.name + ": " + errors.front().message);
  if (const auto errors = channel_setting_errors(desc); !errors.empty())
    throw UsageError("policy " + desc.name + ": " + errors.front().message);
  if (const auto errors = replay_setting_errors(desc); !errors.empty())
    throw UsageError("policy " + desc.name + ": " + errors.front().message);
  // Head plans (head_budgets.h) are per-head budgets of a one-shot, per-KV-head selection; the DSL
  // refuses the rest at the key, this guards hand-written programs.
  if (desc.has_head_plan && (desc.select.scope != SelectScope::KvHead || desc.run.cascading || unfold))
    throw UsageError("policy " + desc.name + ": head_mode / head_weight need select scope kv_head, no cascading and no unfold_gqa");
  if (desc.select.layer_allocation == LayerAllocation::Tokens && (!desc.has_layer_weight || desc.run.cascading))
    throw UsageError("policy " + desc.name + ": layer_allocation tokens needs a layer_weight and no cascading");
  budget.check_model(config.n_layers, config.n_kv_heads);
}

}  // namespace kvevict
