// A policy file's select section (FileCompiler, policy_file_compiler.h): how the kept set is
// chosen, the selection rules beyond top-k, and the stages of a staged selection.
#include <cmath>
#include <string>

#include "dsl/policy_file_compiler.h"
#include "dsl/policy_keys.h"

namespace kvevict::dsl::policy_file_detail {

// select: how the kept set is chosen (randomness, scope, kept order, budget allocation, units,
// then the rules beyond top-k).
void FileCompiler::select_settings(const YAML::Node& root, YAML::Node& select) {
  if (!select.IsMap()) return;
  PolicyDescription& d = out_.desc;
  double v;
  if (constant_setting(select, "random_share", false, v)) {
    if (!(v >= 0 && v <= 1)) diag_.error(pos_of(select["random_share"]), "'random_share' must be in 0..1, got " + fmt(v));
    else d.select.random_share = v;
  }
  if (constant_setting(select, "temperature", false, v)) {
    if (!(v > 0 && v < 1e30)) diag_.error(pos_of(select["temperature"]), "'temperature' must be positive, got " + fmt(v));
    else d.select.temperature = v;
  }
  if (constant_setting(select, "floor_alpha", false, v)) {
    if (!(v >= 0 && v <= 1)) diag_.error(pos_of(select["floor_alpha"]), "'floor_alpha' must be in 0..1, got " + fmt(v));
    else d.select.floor_alpha = v;
  }
  d.select.scope = choice(select, "scope", d.select.scope);
  d.select.kept_order = choice(select, "kept_order", d.select.kept_order);
  d.select.layer_allocation = choice(select, "layer_allocation", d.select.layer_allocation);
  d.select.head_allocation = choice(select, "head_allocation", d.select.head_allocation);
  if (d.select.head_allocation == HeadAllocation::Tokens && !root["head_weight"])
    diag_.error(pos_of(select["head_allocation"]), "'head_allocation: tokens' reads each head's count from a head_weight program; the file has none");
  if (d.select.layer_allocation == LayerAllocation::Tokens && !root["layer_weight"])
    diag_.error(pos_of(select["layer_allocation"]), "'layer_allocation: tokens' reads each layer's budget from a layer_weight program; the file has none");
  if (d.select.layer_allocation == LayerAllocation::Tokens && d.run.cascading)
    diag_.error(pos_of(select["layer_allocation"]), "'layer_allocation: tokens' cannot be combined with run.cascading (a cascade re-splits one total)");
  if (constant_setting(select, "unfold_gqa", true, v)) d.select.unfold_gqa = v != 0;
  d.select.unit = choice(select, "unit", d.select.unit);
  d.select.chunk_score = choice(select, "chunk_score", d.select.chunk_score);
  d.select.quota = choice(select, "quota", d.select.quota);
  length_setting(select, "chunk", d.select.chunk);
  d.select.gate = choice(select, "gate", d.select.gate);
  length_setting(select, "rescue", d.select.rescue);
  selection_rule_settings(root, select);
}

// The selection rules beyond top-k (core/engine/selection_checks.h lists their combinations):
//   threshold_setting = "threshold:" EXPR ;    EXPR over parameters, a finite number
//   score_at_setting  = "score_at:" ( "eviction" | "insertion" | ENUM_PARAM ) ;
//   mass_setting      = "mass:" EXPR ;         EXPR over parameters, 0 < value <= 1
//   stages_setting    = "stages:" "[" stage { "," stage } "]" ;   at most kMaxStages
//   stage             = "{" "score:" NAME [ "," ( "keep:" | "share:" ) EXPR ] "}" ;   NAME: score or a key of scores:
void FileCompiler::selection_rule_settings(const YAML::Node& root, const YAML::Node& select) {
  PolicySelect& s = out_.desc.select;
  double v;
  if (constant_setting(select, "threshold", false, v)) {
    if (!std::isfinite(v)) diag_.error(pos_of(select["threshold"]), "'threshold' must be a finite number, got " + fmt(v));
    else s.has_threshold = true, s.threshold = v;
  }
  s.score_at = choice(select, "score_at", s.score_at);
  if (constant_setting(select, "mass", false, v)) {
    if (!(v > 0 && v <= 1)) diag_.error(pos_of(select["mass"]), "'mass' is a share of the attention mass in (0, 1], got " + fmt(v));
    else s.mass = v;
  }
  stages_setting(root, select["stages"]);
}

void FileCompiler::stages_setting(const YAML::Node& root, const YAML::Node& stages) {
  if (!stages) return;
  if (!stages.IsSequence() || stages.size() == 0 || stages.size() > kMaxStages) {
    diag_.error(pos_of(stages), "'stages' must be a list of 1 to " + std::to_string(kMaxStages) +
                                    " stages like {score: NAME, keep: EXPR}");
    return;
  }
  const YAML::Node scores = root["scores"];
  double v;
  for (const YAML::Node& st : stages) {
    if (!st.IsMap()) { diag_.error(pos_of(st), "a stage must be a mapping {score: NAME, keep: EXPR}"); continue; }
    check_keys(st, policy_stage_keys(), "stage");
    PolicySelect::Stage stage;
    const YAML::Node name = st["score"];
    if (!name || !name.IsScalar()) { diag_.error(pos_of(st), "a stage needs 'score: NAME' (score or a key of 'scores:')"); continue; }
    stage.program = name.Scalar() == "score" ? 0 : -1;
    if (stage.program < 0 && scores && scores.IsMap()) {
      int i = 1;
      for (auto it = scores.begin(); it != scores.end(); ++it, ++i)
        if (it->first.IsScalar() && it->first.Scalar() == name.Scalar()) stage.program = i;
    }
    if (stage.program < 0) {
      diag_.error(pos_of(name), "stage score '" + name.Scalar() + "' is neither 'score' nor a key of 'scores:'");
      continue;
    }
    if (constant_setting(st, "keep", false, v)) {
      if (!(v > 0 && v <= 1)) diag_.error(pos_of(st["keep"]), "a stage's 'keep' is the share of its input it keeps, in (0, 1], got " + fmt(v));
      else stage.keep = v;
    }
    if (constant_setting(st, "share", false, v)) {
      if (!(v > 0 && v <= 1)) diag_.error(pos_of(st["share"]), "a stage's 'share' is its part of the free budget, in (0, 1], got " + fmt(v));
      else stage.share = v;
    }
    out_.desc.select.stages.push_back(stage);
  }
  share_stage_checks(stages);
}

// Stages either keep a share of their input (keep, sequential) or take a share of one budget
// (share, every stage but the last, which takes the rest); the shares add up to at most 1.
void FileCompiler::share_stage_checks(const YAML::Node& stages) {
  const auto& list = out_.desc.select.stages;
  if (list.size() != stages.size()) return;  // a stage was already refused
  bool any_share = false, any_keep = false;
  double sum = 0;
  for (const auto& st : list) any_share |= st.share > 0, any_keep |= st.keep > 0, sum += st.share;
  if (!any_share) return;
  if (any_keep) diag_.error(pos_of(stages), "stages take either 'keep' (each of its input) or 'share' (of one budget), not both");
  for (size_t i = 0; i + 1 < list.size(); ++i)
    if (!(list[i].share > 0)) diag_.error(pos_of(stages[i]), "with shares, every stage but the last needs 'share: EXPR'");
  if (list.back().share > 0 && list.size() > 1)
    diag_.error(pos_of(stages[list.size() - 1]["share"]), "the last stage takes the rest of the budget; it has no 'share'");
  if (list.size() == 1) diag_.error(pos_of(stages), "'share' splits one budget between stages; a single stage has nothing to share");
  if (sum > 1 + 1e-6) diag_.error(pos_of(stages), "the stages' shares add up to " + fmt(sum) + ", more than the whole budget");
}

}  // namespace kvevict::dsl::policy_file_detail
