#pragma once
// The PolicyProgram the engine runs: a compiled policy file evaluated by the CPU interpreter.
#include "core/engine/policy_program.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl {

class InterpretedPolicy : public PolicyProgram {
 public:
  explicit InterpretedPolicy(CompiledPolicy compiled) : c_(std::move(compiled)) {}
  const PolicyDescription& description() const override { return c_.desc; }
  void score(const ScoreInputs& in, bool decoding, float* out) const override;
  double layer_weight(const LayerWeightInputs& in) const override;
  int window_for(int prompt_len) const override;
  PolicyProtect protect_for(int prompt_len) const override;
  double decode_budget_for(int prompt_len, int decode_step, double budget) const override;
  HeadPlan head_plan(const ScoreInputs& in) const override;
  void channel_score(const ScoreInputs& in, float* out) const override;
  void stage_score(int program, const ScoreInputs& in, float* out) const override;
  std::string check_geometry(const ModelGeometry& model) const override;
  const CompiledPolicy& compiled() const { return c_; }

 private:
  void run_score(const LoweredProgram& p, const ScoreInputs& in, float* out) const;
  void refuse_device_signals(const ScoreInputs& in) const;  // std::logic_error when any is set
  CompiledPolicy c_;
};

}  // namespace kvevict::dsl
