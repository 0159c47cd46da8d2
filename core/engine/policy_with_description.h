#pragma once
// A policy run under another description: every program call goes to the wrapped policy, only
// description() is the copy the caller edits. For tests and benchmarks that take the engine's other
// path for the same programs (e.g. decode_scores_each_entry_alone cleared: every decode step scores
// whole heads and every hidden state is recorded), so the two paths can be compared.
#include <string>

#include "core/engine/policy_program.h"

namespace kvevict {

class PolicyWithDescription final : public PolicyProgram {
 public:
  // `p` must outlive this object.
  explicit PolicyWithDescription(const PolicyProgram& p) : p_(p), desc_(p.description()) {}
  PolicyDescription& edit() { return desc_; }

  const PolicyDescription& description() const override { return desc_; }
  void score(const ScoreInputs& in, bool decoding, float* out) const override { p_.score(in, decoding, out); }
  double layer_weight(const LayerWeightInputs& in) const override { return p_.layer_weight(in); }
  bool layer_weight_takes_device_signals() const override { return p_.layer_weight_takes_device_signals(); }
  int window_for(int prompt_len) const override { return p_.window_for(prompt_len); }
  PolicyProtect protect_for(int prompt_len) const override { return p_.protect_for(prompt_len); }
  double decode_budget_for(int prompt_len, int decode_step, double budget) const override {
    return p_.decode_budget_for(prompt_len, decode_step, budget);
  }
  void stage_score(int program, const ScoreInputs& in, float* out) const override { p_.stage_score(program, in, out); }
  HeadPlan head_plan(const ScoreInputs& in) const override { return p_.head_plan(in); }
  void channel_score(const ScoreInputs& in, float* out) const override { p_.channel_score(in, out); }
  SelectionDevice selection_device() const override { return p_.selection_device(); }
  bool scores_device_signals() const override { return p_.scores_device_signals(); }
  int cuda_device() const override { return p_.cuda_device(); }
  bool scores_to_device() const override { return p_.scores_to_device(); }
  void score_on_device(const ScoreInputs& in, bool decoding, float* device_out) const override {
    p_.score_on_device(in, decoding, device_out);
  }
  std::string check_geometry(const ModelGeometry& model) const override { return p_.check_geometry(model); }

 private:
  const PolicyProgram& p_;
  PolicyDescription desc_;
};

}  // namespace kvevict
