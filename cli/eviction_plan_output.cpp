#include "cli/eviction_plan_output.h"

namespace kvevict::cli {
namespace {

std::string budget_kind_name(Budget::Kind kind) {
  switch (kind) {
    case Budget::Kind::Fraction: return "fraction";
    case Budget::Kind::TokensPerHead: return "tokens_per_head";
    case Budget::Kind::TokensPerHeadExclWindow: return "excl_window";
    case Budget::Kind::Total: return "total";
    case Budget::Kind::Full: return "full";
  }
  return "?";
}

nlohmann::json protected_json(const ProtectedSet& p) { return {{"first", p.first}, {"recent", p.recent}}; }

nlohmann::json selection_json(const PlanSelection& s) {
  return {{"scope", mode_name(s.scope)},
          {"unit", mode_name(s.unit)},
          {"quota", mode_name(s.quota)},
          {"chunk", s.chunk},
          {"chunk_score", mode_name(s.chunk_score)},
          {"gate", mode_name(s.gate)},
          {"rescue", s.rescue},
          {"kept_order", mode_name(s.kept_order)},
          {"score_at", mode_name(s.score_at)},
          {"layer_allocation", mode_name(s.layer_allocation)},
          {"head_allocation", mode_name(s.head_allocation)},
          {"random_share", s.random_share},
          {"temperature", s.temperature},
          {"floor_alpha", s.floor_alpha},
          {"mass", s.mass},
          {"threshold", s.threshold},
          {"threshold_value", s.threshold_value},
          {"stages", s.stages},
          {"stage_shares", s.stage_shares},
          {"kept_count_is_output", s.kept_count_is_output},
          {"frozen_scores", s.frozen_scores}};
}

}  // namespace

nlohmann::json eviction_plan_json(const EvictionPlan& plan, const std::string& policy, const std::string& budget) {
  const PlanGeometry& g = plan.geometry;
  const PlanBudget& b = plan.budget;
  nlohmann::json budget_plan = {{"kind", budget_kind_name(b.kind)},
                                {"tokens_per_head", b.tokens_per_head},
                                {"total", b.total},
                                {"protected_floor", b.protected_floor},
                                {"layer_rule", mode_name(b.layer_rule)},
                                {"head_rule", mode_name(b.head_rule)}};
  if (plan.static_layer_budgets()) budget_plan["layers"] = b.layer;
  return {{"policy", policy},
          {"budget", budget},
          {"prompt_tokens", plan.prompt_len},
          {"geometry",
           {{"n_layers", g.n_layers}, {"n_kv_heads", g.n_kv_heads}, {"n_heads", g.n_heads}, {"head_dim", g.head_dim},
            {"stored_heads", g.stored_heads}, {"gqa_mode", g.unfold_gqa ? "unfold" : "kv_head"}}},
          {"window", plan.window},
          {"window_rows", plan.window_rows},
          {"query_window", plan.query_window},
          {"protect", protected_json(plan.protect)},
          {"budget_plan", budget_plan},
          {"select", selection_json(plan.select)},
          {"prefill",
           {{"evicts", plan.prefill.evicts}, {"cascading", plan.prefill.cascading}, {"block", plan.prefill.block},
            {"skip_rule", mode_name(plan.prefill.skip_rule)}, {"skip", plan.prefill.skip}}},
          {"decode",
           {{"every", plan.decode.every}, {"slack", plan.decode.slack}, {"has_budget", plan.decode.has_budget},
            {"own_score", plan.decode.own_score}, {"uses_window_attention", plan.decode.uses_window_attention},
            {"protect", protected_json(plan.decode.protect)}}},
          {"stages",
           {{"merge_on_evict", plan.stages.merge_on_evict}, {"merge_per_layer", plan.stages.merge_per_layer},
            {"codebook", plan.stages.codebook}, {"prune_key_channels", plan.stages.prune_key_channels},
            {"reassign_positions", plan.stages.reassign_positions}}}};
}

}  // namespace kvevict::cli
