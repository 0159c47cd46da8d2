#include "core/engine/selection_checks.h"

#include "core/engine/chunk_selection.h"

namespace kvevict {
namespace {

void threshold_errors(const PolicyDescription& d, std::vector<SettingError>& e) {
  const PolicySelect& s = d.select;
  if (!s.has_threshold) return;
  const char* what = "'threshold' ";
  if (d.run.has_decode_budget)
    e.push_back({"select", "threshold", std::string(what) + "is capped by --budget; run.decode_budget would let the cache grow "
                                                            "without that cap while decoding"});
  if (s.scope != SelectScope::KvHead && s.scope != SelectScope::LayerShared)
    e.push_back({"select", "threshold", std::string(what) + "needs scope kv_head or layer_shared"});
  if (chunked_selection(s)) e.push_back({"select", "threshold", std::string(what) + "cannot be combined with chunk rules"});
  if (s.random_share > 0) e.push_back({"select", "threshold", std::string(what) + "cannot be combined with a random share"});
  if (s.unfold_gqa) e.push_back({"select", "threshold", std::string(what) + "cannot be combined with unfold_gqa"});
}

void score_at_errors(const PolicyDescription& d, std::vector<SettingError>& e) {
  if (d.select.score_at != ScoreAt::Insertion) return;
  const std::string why = "'score_at: insertion' keeps one frozen score per cache entry";
  if (d.run.prefill_block > 0) e.push_back({"select", "score_at", why + "; a prefill in blocks would score old entries again"});
  if (d.select.unfold_gqa) e.push_back({"select", "score_at", why + "; it cannot be combined with unfold_gqa"});
}

void stage_errors(const PolicyDescription& d, std::vector<SettingError>& e) {
  const PolicySelect& s = d.select;
  if (s.stages.empty()) return;
  const std::string why = "'stages' cut each head once at prefill";
  if (s.scope != SelectScope::KvHead) e.push_back({"select", "stages", why + "; they need scope kv_head"});
  if (d.run.cascading) e.push_back({"select", "stages", why + "; they cannot be combined with cascading"});
  if (d.run.decode_every > 0) e.push_back({"select", "stages", why + "; they cannot evict while decoding"});
  if (d.run.prefill_block > 0) e.push_back({"select", "stages", why + "; they cannot be combined with prefill_block"});
  if (s.has_threshold) e.push_back({"select", "stages", why + "; they cannot be combined with a threshold"});
  if (s.score_at == ScoreAt::Insertion) e.push_back({"select", "stages", why + "; they score afresh (no score_at: insertion)"});
  if (chunked_selection(s)) e.push_back({"select", "stages", why + "; they cannot be combined with chunk rules"});
  if (s.random_share > 0) e.push_back({"select", "stages", why + "; they cannot be combined with a random share"});
  if (s.unfold_gqa) e.push_back({"select", "stages", why + "; they cannot be combined with unfold_gqa"});
  if (d.has_head_plan) e.push_back({"select", "stages", why + "; they cannot be combined with head_mode / head_weight"});
  if (d.merge.enabled && d.merge.method != MergeMethod::Codebook)
    e.push_back({"select", "stages", why + "; they cannot be combined with a merge-on-evict merge.method"});
}

void model_scope_errors(const PolicyDescription& d, std::vector<SettingError>& e) {
  const PolicySelect& s = d.select;
  if (s.scope != SelectScope::Model) return;
  const std::string why = "'scope: model' decides once, after every layer is prefilled";
  if (d.run.cascading) e.push_back({"select", "scope", why + "; it cannot be combined with cascading"});
  if (d.run.decode_every > 0) e.push_back({"select", "scope", why + "; it cannot evict while decoding"});
  if (d.run.prefill_block > 0) e.push_back({"select", "scope", why + "; it cannot be combined with prefill_block"});
  if (d.has_layer_weight) e.push_back({"select", "scope", why + "; the pool sets the layers' shares, so a layer_weight is not read"});
  if (s.layer_allocation != LayerAllocation::Share) e.push_back({"select", "scope", why + "; it cannot be combined with layer_allocation"});
  if (chunked_selection(s)) e.push_back({"select", "scope", why + "; it cannot be combined with chunk rules"});
  if (s.random_share > 0) e.push_back({"select", "scope", why + "; it cannot be combined with a random share"});
  if (s.unfold_gqa) e.push_back({"select", "scope", why + "; it cannot be combined with unfold_gqa"});
}

void mass_errors(const PolicyDescription& d, std::vector<SettingError>& e) {
  const PolicySelect& s = d.select;
  const bool mass = s.layer_allocation == LayerAllocation::Mass;
  if (mass && !(s.mass > 0 && s.mass <= 1))
    e.push_back({"select", "layer_allocation", "'layer_allocation: mass' needs 'mass: EXPR', the attention mass to reach (0 < mass <= 1)"});
  if (!mass && s.mass > 0) e.push_back({"select", "mass", "'mass' is read only with 'layer_allocation: mass'"});
  if (mass && d.run.cascading)
    e.push_back({"select", "layer_allocation", "'layer_allocation: mass' cannot be combined with run.cascading (a cascade re-splits one total)"});
  if (mass && d.has_layer_weight)
    e.push_back({"select", "layer_allocation", "'layer_allocation: mass' sets the layers' budgets from the scores; a layer_weight is not read"});
}

}  // namespace

std::vector<SettingError> selection_setting_errors(const PolicyDescription& d) {
  std::vector<SettingError> e;
  threshold_errors(d, e);
  score_at_errors(d, e);
  stage_errors(d, e);
  model_scope_errors(d, e);
  mass_errors(d, e);
  return e;
}

}  // namespace kvevict
