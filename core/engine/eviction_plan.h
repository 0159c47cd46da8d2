#pragma once
// The eviction plan: "plan once, run many times" (FlashInfer's habit). Everything the engine can
// decide on the host for one (policy, budget, prompt length, model geometry) before any score
// exists: the observation window, the protected sets of both phases, the budgets when their split
// is static (or which rule splits them at run time when it is not), the skip rule's verdict, the
// selection spec and the decode triggers.
//
// CONTRACT.
// * Plain data: ints, doubles, bools, enums (policy_modes.h, Budget::Kind) and vectors of numbers.
//   No pointers or references into a policy, a model or an engine, so a launcher can copy a plan
//   (or parts of it) into kernel parameters, and plans compare with ==.
// * A pure function of its inputs: the same policy (with the same parameters), geometry, budget,
//   prompt length (and, for observe.window_after_token only, prompt tokens) give equal plans.
// * What it does not hold is decided at run time, from data: scores, layer weights (layer_weight
//   programs: CAKE, PyramidKV), head plans (head_mode / head_weight), cascading re-splits over what
//   each layer still holds, threshold / model-wide kept counts, mass budgets, decode budgets
//   (run.decode_budget after n generated tokens). The plan then names the rule (LayerBudgetRule,
//   HeadBudgetRule) and the engine applies it with the allocators (budget_allocator.h,
//   head_budgets.h, mass_budget.h) as the data arrives.
// * Static budgets (`PlanBudget::layer`, `head`) are the split of the whole prompt's cache: each
//   layer capped at prompt_len. The engine uses them when its cache holds the whole prompt in every
//   head; a prefill in blocks re-splits at each block over what the layers hold then (the same
//   allocator, capped by those lengths).
// * A layer_weight that reads no signal (PyramidKV's ramp of scalars) would be static too, but a
//   PolicyProgram does not say which of its programs read signals: it is evaluated at run time.
// * Errors: UsageError (exit 2) for a policy that does not fit the model or budget (as the engine's
//   constructor always did), a negative resolved window or protected count, a negative prompt
//   length, or a window_after_token prompt without the delimiter (and no window to fall back on).
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/engine/budget.h"
#include "core/engine/policy_modes.h"

namespace kvevict {

class PolicyProgram;
struct ModelConfig;
struct PolicyDescription;

// The heads the policy selects for. Stored heads are KV heads (stored_group = group query heads
// each), or query heads when the policy unfolds GQA (stored_heads = n_heads, stored_group = 1).
struct PlanGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;  // the model's KV heads
  int n_heads = 0;     // the model's query heads
  int group = 1;       // query heads per KV head (n_heads / n_kv_heads)
  int head_dim = 0;
  int n_embd = 0;      // the model dimension
  bool unfold_gqa = false;
  int stored_heads = 0;
  int stored_group = 1;
  bool operator==(const PlanGeometry&) const = default;
};

// A resolved protected set: the first `first` positions and the `recent` newest entries.
struct ProtectedSet {
  int first = 0;
  int recent = 0;
  bool operator==(const ProtectedSet&) const = default;
};

// How each layer's per-head budget is found.
enum class LayerBudgetRule : uint8_t {
  Uniform,   // the total split evenly (largest remainder), floors = protected: static unless cascading
  Weighted,  // split in proportion to the layer_weight program's values (known after scoring)
  Tokens,    // select.layer_allocation tokens: each layer's layer_weight in tokens, capped
  Mass,      // select.layer_allocation mass: from the layer's score mass (mass_budget.h)
};
// How a layer's budget becomes its stored heads' budgets.
enum class HeadBudgetRule : uint8_t {
  Layer,            // every head gets its layer's budget (static when the layers' are)
  LayerAdaptive,    // select.scope layer (Ada-KV): the layer's budget per head on average, split by a joint top-k
  HeadPlan,         // head_mode / head_weight programs (head_budgets.h), split after scoring
  SelectionOutput,  // a threshold or select.scope model: the kept count is the selection's output
};
// When a prompt is left whole (no prefill eviction).
enum class SkipRule : uint8_t {
  WithinBudget,            // S <= B
  WithinBudgetPlusWindow,  // S <= B + W (run.skip_margin_includes_window, CAKE)
  OnlyFullBudget,          // data-dependent budgets (head plans, layer allocation, threshold, stages): only --budget full
};

// Names in reports (kvevict inspect --plan), tied to the enums as policy_modes.h ties its modes.
template <> struct ModeNames<LayerBudgetRule> {
  static constexpr std::array<std::string_view, 4> names = {"uniform", "weighted", "tokens", "mass"};
};
static_assert(ModeNames<LayerBudgetRule>::names.size() == static_cast<size_t>(LayerBudgetRule::Mass) + 1);
template <> struct ModeNames<HeadBudgetRule> {
  static constexpr std::array<std::string_view, 4> names = {"layer", "layer_adaptive", "head_plan", "selection_output"};
};
static_assert(ModeNames<HeadBudgetRule>::names.size() == static_cast<size_t>(HeadBudgetRule::SelectionOutput) + 1);
template <> struct ModeNames<SkipRule> {
  static constexpr std::array<std::string_view, 3> names = {"prompt_within_budget", "prompt_within_budget_plus_window",
                                                            "only_full_budget"};
};
static_assert(ModeNames<SkipRule>::names.size() == static_cast<size_t>(SkipRule::OnlyFullBudget) + 1);

struct PlanBudget {
  Budget::Kind kind = Budget::Kind::Full;
  double tokens_per_head = 0;  // B: the average per (layer, KV head), window and protected tokens included
  int64_t total = 0;           // exact tokens per KV head over all layers (Budget::total_per_kv_head)
  int protected_floor = 0;     // every layer's floor: min(prompt_len, protect first + recent)
  LayerBudgetRule layer_rule = LayerBudgetRule::Uniform;
  HeadBudgetRule head_rule = HeadBudgetRule::Layer;
  // Static budgets (see the contract): [layer], and [layer * stored_heads + stored head] when the
  // head rule is Layer too. Empty when the rule is data-dependent.
  std::vector<int> layer;
  std::vector<int> head;
  bool operator==(const PlanBudget&) const = default;
};

// What select_head and its variants are told (selection.h, chunk_selection.h, threshold_selection.h).
struct PlanSelection {
  SelectScope scope = SelectScope::KvHead;
  SelectUnit unit = SelectUnit::Token;
  SelectQuota quota = SelectQuota::Global;
  ChunkScore chunk_score = ChunkScore::Mean;
  ChunkGate gate = ChunkGate::None;
  KeptOrder kept_order = KeptOrder::Positional;
  ScoreAt score_at = ScoreAt::Eviction;
  LayerAllocation layer_allocation = LayerAllocation::Share;
  HeadAllocation head_allocation = HeadAllocation::Share;
  int chunk = 0, rescue = 0;
  double random_share = 0.0, temperature = 1.0;
  double floor_alpha = 0.0;
  double mass = 0.0;
  bool threshold = false;   // a threshold applies (select.threshold and a budget other than full)
  double threshold_value = 0.0;
  int stages = 0;           // select.stages (0: one selection with `score`)
  bool stage_shares = false;  // the stages split one budget by share
  bool kept_count_is_output = false;  // a threshold or scope model: each head's kept count is recorded as its budget
  bool frozen_scores = false;  // score_at insertion with decode triggers: prefill scores stay, aligned with the cache
  bool operator==(const PlanSelection&) const = default;
};

struct PlanPrefill {
  bool evicts = true;       // run.at_prefill
  bool cascading = false;   // re-split after every layer (CAKE)
  int block = 0;            // run.prefill_block (0: the prompt in one forward call)
  SkipRule skip_rule = SkipRule::WithinBudget;
  bool skip = false;        // the skip rule's verdict for this prompt: no prefill eviction
  bool operator==(const PlanPrefill&) const = default;
};

struct PlanDecode {
  int every = 0;            // a trigger every N decode steps (0: none)
  int slack = 0;            // a layer is cut back once a head holds more than budget + slack
  bool has_budget = false;  // run.decode_budget: the budget is the policy's expression at each trigger
  bool own_score = false;   // a decode score separate from the prefill's
  bool uses_window_attention = true;
  ProtectedSet protect;     // protect.decode_first / decode_recent, else the prefill's
  bool operator==(const PlanDecode&) const = default;
};

// What runs at the end of prefill and around every eviction.
struct PlanStages {
  bool merge_on_evict = false;      // merge.method other than codebook
  bool merge_per_layer = false;     // a layer-level merge rule (d2o)
  bool codebook = false;            // SpindleKV's codebook stage
  bool prune_key_channels = false;  // channel_score with a budget other than full
  bool reassign_positions = false;  // run.reassign_positions
  bool operator==(const PlanStages&) const = default;
};

struct EvictionPlan {
  PlanGeometry geometry;
  int prompt_len = 0;     // 0: before the first prompt (plan_before_prompt)
  int window = 0;         // W resolved for this prompt (window_for, or FinchPress's token-found window)
  // The window clamped to the prompt, min(W, prompt_len): the query rows a one-shot prefill's
  // W x T window product has. A window longer than the prompt changes nothing else: the budget
  // units and the skip rule give the same values with either (both are capped at the prompt).
  int window_rows = 0;
  int query_window = 0;   // query rows kept per layer: max(W, 1 when A_now is read)
  ProtectedSet protect;   // the prefill's protected set
  PlanBudget budget;
  PlanSelection select;
  PlanPrefill prefill;
  PlanDecode decode;
  PlanStages stages;
  bool operator==(const EvictionPlan&) const = default;

  // The static budget of stored head `head` of `layer`; -1 when it is decided at run time.
  int static_head_budget(int layer, int head) const;
  bool static_layer_budgets() const { return !budget.layer.empty(); }
};

// The heads a policy selects for on `config`. Checks that the engine supports the policy with this
// budget on this model (check_engine_supports, PolicyProgram::check_geometry): UsageError if not.
PlanGeometry plan_geometry(const PolicyProgram& policy, const ModelConfig& config, const Budget& budget);

// FinchPress's window (observe.window_after_token): the tokens after the prompt's last delimiter; a
// prompt without one (or ending with it) takes `resolved` (the policy's observe.window), if > 0, else
// UsageError naming the policy.
int window_from_tokens(const PolicyDescription& desc, std::span<const int> tokens, int resolved);

// The plan for a prompt of `prompt_len` tokens. `prompt_tokens` is read only by a policy that finds
// its window after a delimiter token (observe.window_after_token); others may pass nothing.
EvictionPlan make_eviction_plan(const PolicyProgram& policy, const PlanGeometry& geometry, const Budget& budget,
                                int prompt_len, std::span<const int> prompt_tokens = {});
EvictionPlan make_eviction_plan(const PolicyProgram& policy, const ModelConfig& config, const Budget& budget,
                                int prompt_len, std::span<const int> prompt_tokens = {});

// The plan an engine holds before its first prompt: geometry, selection, triggers, and the
// description's own window and protected sets (prompt_len 0, no budgets).
EvictionPlan plan_before_prompt(const PolicyProgram& policy, const PlanGeometry& geometry, const Budget& budget);

}  // namespace kvevict
