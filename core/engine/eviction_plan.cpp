#include "core/engine/eviction_plan.h"

#include <algorithm>
#include <string>

#include "core/engine/budget_allocator.h"
#include "core/engine/engine_checks.h"
#include "core/engine/merge_state.h"
#include "core/engine/policy_program.h"
#include "core/engine/window_observation.h"
#include "core/model/model_config.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

PlanSelection selection_of(const PolicyDescription& desc, const Budget& budget) {
  const PolicySelect& s = desc.select;
  PlanSelection p;
  p.scope = s.scope;
  p.unit = s.unit;
  p.quota = s.quota;
  p.chunk_score = s.chunk_score;
  p.gate = s.gate;
  p.kept_order = s.kept_order;
  p.score_at = s.score_at;
  p.layer_allocation = s.layer_allocation;
  p.head_allocation = s.head_allocation;
  p.chunk = s.chunk;
  p.rescue = s.rescue;
  p.random_share = s.random_share;
  p.temperature = s.temperature;
  p.floor_alpha = s.floor_alpha;
  p.mass = s.mass;
  p.threshold = s.has_threshold && budget.kind != Budget::Kind::Full;  // --budget full turns it off
  p.threshold_value = s.threshold;
  p.stages = static_cast<int>(s.stages.size());
  p.stage_shares = !s.stages.empty() && s.stages.front().share > 0;
  p.kept_count_is_output = s.has_threshold || s.scope == SelectScope::Model;
  p.frozen_scores = s.score_at == ScoreAt::Insertion && desc.run.decode_every > 0;
  return p;
}

PlanStages stages_of(const PolicyDescription& desc, const Budget& budget) {
  PlanStages p;
  p.merge_on_evict = desc.merge.enabled && desc.merge.method != MergeMethod::Codebook;
  p.merge_per_layer = p.merge_on_evict && MergeOnEvictState::merges_per_layer(desc.merge);
  p.codebook = desc.merge.enabled && desc.merge.method == MergeMethod::Codebook;
  p.prune_key_channels = desc.channels.enabled && budget.kind != Budget::Kind::Full;
  p.reassign_positions = desc.run.reassign_positions;
  return p;
}

// The protected sets of both phases (decode_first / decode_recent -1: as at prefill).
void set_protect(EvictionPlan& plan, const PolicyProtect& p) {
  plan.protect = {p.first, p.recent};
  plan.decode.protect = {p.decode_first >= 0 ? p.decode_first : p.first, p.decode_recent >= 0 ? p.decode_recent : p.recent};
}

// The parts that do not depend on the prompt.
EvictionPlan plan_skeleton(const PolicyDescription& desc, const PlanGeometry& geometry, const Budget& budget) {
  EvictionPlan plan;
  plan.geometry = geometry;
  plan.budget.kind = budget.kind;
  plan.select = selection_of(desc, budget);
  plan.stages = stages_of(desc, budget);
  plan.prefill.evicts = desc.run.at_prefill;
  plan.prefill.cascading = desc.run.cascading;
  plan.prefill.block = desc.run.prefill_block;
  // Full and streaming heads, a layer_weight in tokens or mass, a threshold and fractions of stages
  // decide their kept counts themselves: only --budget full turns them off.
  const bool own_counts = desc.has_head_plan || desc.select.layer_allocation != LayerAllocation::Share ||
                          desc.select.has_threshold || !desc.select.stages.empty();
  plan.prefill.skip_rule = own_counts                             ? SkipRule::OnlyFullBudget
                           : desc.run.skip_margin_includes_window ? SkipRule::WithinBudgetPlusWindow
                                                                  : SkipRule::WithinBudget;
  plan.decode.every = desc.run.decode_every;
  plan.decode.slack = desc.run.decode_slack;
  plan.decode.has_budget = desc.run.has_decode_budget;
  plan.decode.own_score = desc.has_decode_score;
  plan.decode.uses_window_attention = desc.run.decode_uses_window_attention;
  PlanBudget& b = plan.budget;
  b.layer_rule = desc.select.layer_allocation == LayerAllocation::Tokens ? LayerBudgetRule::Tokens
                 : desc.select.layer_allocation == LayerAllocation::Mass ? LayerBudgetRule::Mass
                 : desc.has_layer_weight                                 ? LayerBudgetRule::Weighted
                                                                         : LayerBudgetRule::Uniform;
  b.head_rule = plan.select.kept_count_is_output          ? HeadBudgetRule::SelectionOutput
                : desc.has_head_plan                      ? HeadBudgetRule::HeadPlan
                : desc.select.scope == SelectScope::Layer ? HeadBudgetRule::LayerAdaptive
                                                          : HeadBudgetRule::Layer;
  return plan;
}

void set_window(EvictionPlan& plan, const PolicyDescription& desc, int window) {
  plan.window = window;
  plan.window_rows = std::min(window, plan.prompt_len);
  plan.query_window = std::max(window, desc.needs(TensorSignal::CurrentAttention) ? 1 : 0);
}

// The static split of the whole prompt's cache (the contract in the header): every layer gets its
// protected floor, the rest evenly, each capped at the prompt.
void set_static_budgets(EvictionPlan& plan) {
  PlanBudget& b = plan.budget;
  const int L = plan.geometry.n_layers, H = plan.geometry.stored_heads;
  if (b.layer_rule != LayerBudgetRule::Uniform || plan.prefill.cascading) return;
  const std::vector<int64_t> split = allocate_budgets(std::vector<double>(L, 1.0), std::vector<int64_t>(L, b.protected_floor),
                                                      std::vector<int64_t>(L, plan.prompt_len), b.total);
  b.layer.assign(split.begin(), split.end());
  if (b.head_rule != HeadBudgetRule::Layer) return;
  b.head.resize(static_cast<size_t>(L) * H);
  for (int l = 0; l < L; ++l) std::fill_n(b.head.begin() + static_cast<ptrdiff_t>(l) * H, H, b.layer[l]);
}

bool skip_prefill(const EvictionPlan& plan) {
  if (plan.budget.kind == Budget::Kind::Full) return true;
  switch (plan.prefill.skip_rule) {
    case SkipRule::OnlyFullBudget: return false;
    case SkipRule::WithinBudget: return plan.prompt_len <= plan.budget.tokens_per_head;
    case SkipRule::WithinBudgetPlusWindow: return plan.prompt_len <= plan.budget.tokens_per_head + plan.window;
  }
  return false;
}

}  // namespace

int window_from_tokens(const PolicyDescription& desc, std::span<const int> tokens, int resolved) {
  const int id = desc.observe.window_after_token;
  const int w = window_after_token(tokens, id);
  if (w <= 0 && resolved > 0) return resolved;
  if (w <= 0)
    throw UsageError("policy " + desc.name + ": observe.window_after_token: the prompt has " +
                     std::string(w < 0 ? "no" : "nothing after its last") + " delimiter token " + std::to_string(id) +
                     (w < 0 ? "" : " (the window would be empty)"));
  return w;
}

int EvictionPlan::static_head_budget(int layer, int head) const {
  const int H = geometry.stored_heads;
  if (budget.head.empty() || layer < 0 || layer >= geometry.n_layers || head < 0 || head >= H) return -1;
  return budget.head[static_cast<size_t>(layer) * H + head];
}

PlanGeometry plan_geometry(const PolicyProgram& policy, const ModelConfig& config, const Budget& budget) {
  const PolicyDescription& desc = policy.description();
  check_engine_supports(desc, config, budget);
  PlanGeometry g;
  g.n_layers = config.n_layers;
  g.n_kv_heads = config.n_kv_heads;
  g.n_heads = config.n_heads;
  g.group = config.group_size();
  g.head_dim = config.head_dim;
  g.n_embd = config.dim;
  g.unfold_gqa = desc.select.unfold_gqa;
  g.stored_heads = g.unfold_gqa ? g.n_heads : g.n_kv_heads;
  g.stored_group = g.unfold_gqa ? 1 : g.group;
  const ModelGeometry model{.n_layers = g.n_layers, .n_kv_heads = g.stored_heads, .head_dim = g.head_dim,
                            .n_heads = g.n_heads, .n_embd = g.n_embd};
  if (const std::string why = policy.check_geometry(model); !why.empty()) throw UsageError(why);
  return g;
}

EvictionPlan plan_before_prompt(const PolicyProgram& policy, const PlanGeometry& geometry, const Budget& budget) {
  const PolicyDescription& desc = policy.description();
  EvictionPlan plan = plan_skeleton(desc, geometry, budget);
  set_window(plan, desc, desc.window);
  set_protect(plan, desc.protect);
  return plan;
}

EvictionPlan make_eviction_plan(const PolicyProgram& policy, const PlanGeometry& geometry, const Budget& budget,
                                int prompt_len, std::span<const int> prompt_tokens) {
  const PolicyDescription& desc = policy.description();
  if (prompt_len < 0)
    throw UsageError("policy " + desc.name + ": an eviction plan needs a prompt length >= 0, not " + std::to_string(prompt_len));
  EvictionPlan plan = plan_skeleton(desc, geometry, budget);
  plan.prompt_len = prompt_len;
  // Policies may make the window and protected sets depend on the prompt length (NACL).
  set_window(plan, desc, policy.window_for(prompt_len));
  set_protect(plan, policy.protect_for(prompt_len));
  if (plan.window < 0 || plan.protect.first < 0 || plan.protect.recent < 0)
    throw UsageError("policy " + desc.name + ": window and protected counts must be >= 0 (prompt of " +
                     std::to_string(prompt_len) + " tokens)");
  if (desc.observe.window_after_token >= 0) set_window(plan, desc, window_from_tokens(desc, prompt_tokens, plan.window));
  // The budget's unit may need the window (excl_window): resolved after it.
  const BudgetGeometry bg{geometry.n_layers, geometry.n_kv_heads, plan.window};
  PlanBudget& b = plan.budget;
  b.tokens_per_head = budget.tokens_per_head(prompt_len, bg);
  b.total = budget.total_per_kv_head(prompt_len, bg);
  b.protected_floor = std::min(prompt_len, plan.protect.first + plan.protect.recent);  // prompt positions are contiguous
  plan.prefill.skip = skip_prefill(plan);
  set_static_budgets(plan);
  return plan;
}

EvictionPlan make_eviction_plan(const PolicyProgram& policy, const ModelConfig& config, const Budget& budget,
                                int prompt_len, std::span<const int> prompt_tokens) {
  return make_eviction_plan(policy, plan_geometry(policy, config, budget), budget, prompt_len, prompt_tokens);
}

}  // namespace kvevict
