#include "dsl/compiled_program.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/util/error.h"
#include "dsl/interpreter.h"
#include "dsl/policy_tables.h"

namespace kvevict::dsl {
namespace {

void fill_scalars(EvalInputs& e, const ScoreInputs& in) {
#define KVEVICT_FILL_SCALAR(name, dsl, field) e.scalars[static_cast<int>(ScalarSignal::name)] = static_cast<float>(in.field);
  KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_FILL_SCALAR)
#undef KVEVICT_FILL_SCALAR
}

HeadSignals head_signals(const ScoreInputs& in) {
  HeadSignals h;
  h.tensors = in.tensor;
  h.position = in.position;
  h.kv_head = in.kv_head;
  return h;
}

int setting_int(const LoweredProgram& p, int fallback, int prompt_len) {
  if (p.output < 0) return fallback;
  double v = evaluate_setting(p, prompt_len);
  if (!(v > 0)) return 0;
  return static_cast<int>(std::min(v, 1e9));
}

}  // namespace

namespace {
// One scalar of a per-(layer, KV head) program (head_mode, head_weight).
double head_scalar(const LoweredProgram& p, const ScoreInputs& in) {
  EvalInputs e;
  e.ext = {.g = 1, .h = in.group, .q = in.W, .d = in.head_dim, .c = in.n_embd, .t = in.T};
  fill_scalars(e, in);
  e.heads.push_back(head_signals(in));
  e.seed = in.seed;
  e.layer = in.layer;
  return evaluate(p, e).at(0);
}
}  // namespace

// The engine hands device memory only to scores_device_signals() programs; the interpreter reads
// host memory, so such inputs are a bug of the caller, never read.
void InterpretedPolicy::refuse_device_signals(const ScoreInputs& in) const {
  if (in.has_device_memory())
    throw std::logic_error("policy '" + c_.desc.name + "': the interpreter was handed signals in device memory");
}

HeadPlan InterpretedPolicy::head_plan(const ScoreInputs& in) const {
  refuse_device_signals(in);
  HeadPlan plan;
  if (c_.head_mode.output >= 0) plan.mode = head_mode_from_value(head_scalar(c_.head_mode, in));
  if (c_.head_weight.output >= 0) {
    const double w = head_scalar(c_.head_weight, in);
    plan.weight = std::isfinite(w) && w > 0 ? w : 0.0;
  }
  return plan;
}

// channel_score[d]: one value per key channel. A value without axis d (a constant, say) is
// broadcast over the channels; NaN stays NaN (channel_selection.h ranks it lowest).
void InterpretedPolicy::channel_score(const ScoreInputs& in, float* out) const {
  refuse_device_signals(in);
  if (c_.channel_score.output < 0) throw RuntimeError("policy '" + c_.desc.name + "' has no channel_score program");
  if (in.T < 0 || in.group < 1 || in.W < 0 || in.head_dim < 1)
    throw RuntimeError("policy '" + c_.desc.name + "': invalid channel_score inputs");
  EvalInputs e;
  // The model axis c (hidden[c, t]) has its extent here as in every other per-head program.
  e.ext = {.g = 1, .h = in.group, .q = in.W, .d = in.head_dim, .c = in.n_embd, .t = in.T};
  fill_scalars(e, in);
  e.heads.push_back(head_signals(in));
  e.seed = in.seed;
  e.layer = in.layer;
  const std::vector<float> v = evaluate(c_.channel_score, e);
  const size_t d = static_cast<size_t>(in.head_dim);
  if (v.size() != d && v.size() != 1)
    throw RuntimeError("policy '" + c_.desc.name + "': channel_score has " + std::to_string(v.size()) + " values for " +
                       std::to_string(d) + " channels");
  for (size_t c = 0; c < d; ++c) out[c] = v.size() == 1 ? v[0] : v[c];
}

std::string InterpretedPolicy::check_geometry(const ModelGeometry& model) const {
  const std::string why = check_table_geometry(c_.tables, model);
  return why.empty() ? why : "policy '" + c_.desc.name + "' (" + c_.desc.source + "): " + why;
}

void InterpretedPolicy::score(const ScoreInputs& in, bool decoding, float* out) const {
  run_score(decoding && c_.desc.has_decode_score ? c_.decode_score : c_.score, in, out);
}

void InterpretedPolicy::stage_score(int program, const ScoreInputs& in, float* out) const {
  if (program < 0 || program > static_cast<int>(c_.stage_scores.size()))
    throw RuntimeError("policy '" + c_.desc.name + "': no score program " + std::to_string(program));
  run_score(program == 0 ? c_.score : c_.stage_scores[static_cast<size_t>(program - 1)], in, out);
}

void InterpretedPolicy::run_score(const LoweredProgram& p, const ScoreInputs& in, float* out) const {
  refuse_device_signals(in);
  if (in.T < 0 || in.group < 1 || in.W < 0) throw RuntimeError("policy '" + c_.desc.name + "': invalid score inputs");
  EvalInputs e;
  e.ext = {.g = 1, .h = in.group, .q = in.W, .d = in.head_dim, .c = in.n_embd, .t = in.T};
  fill_scalars(e, in);
  e.heads.push_back(head_signals(in));
  e.seed = in.seed;
  e.layer = in.layer;
  evaluate_scores(p, e, out);
}

double InterpretedPolicy::layer_weight(const LayerWeightInputs& in) const {
  if (!c_.desc.has_layer_weight) return 1.0;
  if (in.heads.empty()) throw RuntimeError("policy '" + c_.desc.name + "': layer_weight needs at least one KV head");
  for (const ScoreInputs& h : in.heads) refuse_device_signals(h);
  const ScoreInputs& h0 = in.heads[0];
  for (const auto& h : in.heads)
    if (h.T != h0.T || h.W != h0.W || h.group != h0.group)
      throw RuntimeError("policy '" + c_.desc.name + "': layer_weight needs every KV head of the layer at the same length");
  EvalInputs e;
  e.ext = {.g = static_cast<int>(in.heads.size()), .h = h0.group, .q = h0.W, .d = h0.head_dim, .c = h0.n_embd, .t = h0.T};
  fill_scalars(e, h0);
  e.scalars[static_cast<int>(ScalarSignal::Layer)] = static_cast<float>(in.layer);
  e.scalars[static_cast<int>(ScalarSignal::NLayers)] = static_cast<float>(in.n_layers);
  e.scalars[static_cast<int>(ScalarSignal::PromptLen)] = static_cast<float>(in.prompt_len);
  e.scalars[static_cast<int>(ScalarSignal::NKvHeads)] = static_cast<float>(in.heads.size());
  e.scalars[static_cast<int>(ScalarSignal::Budget)] = static_cast<float>(in.budget);
  for (const auto& h : in.heads) e.heads.push_back(head_signals(h));
  e.layer = in.layer;
  return usable_layer_weight(evaluate(c_.layer_weight, e).at(0));
}

int InterpretedPolicy::window_for(int prompt_len) const { return setting_int(c_.window, c_.desc.window, prompt_len); }

PolicyProtect InterpretedPolicy::protect_for(int prompt_len) const {
  PolicyProtect p;
  p.first = setting_int(c_.protect_first, c_.desc.protect.first, prompt_len);
  p.recent = setting_int(c_.protect_recent, c_.desc.protect.recent, prompt_len);
  p.decode_first = setting_int(c_.protect_decode_first, c_.desc.protect.decode_first, prompt_len);
  p.decode_recent = setting_int(c_.protect_decode_recent, c_.desc.protect.decode_recent, prompt_len);
  return p;
}

double InterpretedPolicy::decode_budget_for(int prompt_len, int decode_step, double budget) const {
  if (!c_.desc.run.has_decode_budget) return budget;
  return evaluate_decode_budget(c_.decode_budget, prompt_len, decode_step, budget);
}

}  // namespace kvevict::dsl
