#pragma once
// A stand-in for the CUDA scoring backend (JitPolicyProgram on a GPU) in CPU tests: it takes device
// signals (scores_device_signals), which in these runs are a test's host buffer marked as device
// memory (the window attention, the cached rows, their positions and the block's attention inputs
// of test::WindowAttentionInjector, the column sums of a decode step), counts the calls that got
// them that way, and scores with the wrapped program; it scores into "device" memory too (scores_to_device: a twin selector's host buffer).
#include <cstdint>

#include "core/engine/policy_program.h"

namespace kvevict::test {

class InPlaceScoring : public PolicyProgram {
 public:
  InPlaceScoring(const PolicyProgram& p, bool layers_on_device) : p_(p), layers_on_device_(layers_on_device) {}
  const PolicyDescription& description() const override { return p_.description(); }
  void score(const ScoreInputs& in, bool decoding, float* out) const override {
    ScoreInputs host = in;
    if (in.on_device(TensorSignal::WindowAttention)) ++scored_in_place;
    if (in.on_device(TensorSignal::CurrentAttention)) ++scored_current_in_place;
    if (in.on_device(TensorSignal::Keys) || in.on_device(TensorSignal::Values) ||
        in.on_device(TensorSignal::KeysPreRope) || in.on_device(TensorSignal::OutputNormL1))
      ++scored_rows_in_place;
    if (in.on_device(TensorSignal::KeyNorm) || in.on_device(TensorSignal::ValueNorm)) ++scored_norms_in_place;
    if (in.on_device(TensorSignal::AccumulatedAttention)) ++scored_accumulated_in_place;
    if (in.on_device(TensorSignal::HiddenState)) ++scored_hidden_in_place;
    host.device_signals = 0;  // the "device" memory is the test's host buffer
    if (in.device_position) {  // the "device" cache's positions are scored, not the host's
      ++scored_positions_in_place;
      host.position = in.device_position;
      host.device_position = nullptr;
    }
    p_.score(host, decoding, out);
  }
  double layer_weight(const LayerWeightInputs& in) const override {
    if (!layers_on_device_) return p_.layer_weight(in);  // the interpreter refuses device signals
    LayerWeightInputs host = in;
    for (ScoreInputs& h : host.heads) {
      if (h.on_device(TensorSignal::WindowAttention)) ++layer_heads_in_place;
      h.device_signals = 0;
      if (h.device_position) h.position = h.device_position;
      h.device_position = nullptr;
    }
    return p_.layer_weight(host);
  }
  bool layer_weight_takes_device_signals() const override { return layers_on_device_; }
  int window_for(int prompt_len) const override { return p_.window_for(prompt_len); }
  PolicyProtect protect_for(int prompt_len) const override { return p_.protect_for(prompt_len); }
  double decode_budget_for(int prompt_len, int decode_step, double budget) const override {
    return p_.decode_budget_for(prompt_len, decode_step, budget);
  }
  HeadPlan head_plan(const ScoreInputs& in) const override { return p_.head_plan(in); }
  bool scores_device_signals() const override { return true; }
  // The device its "kernels" run on: the injector's signals say device 0 (another is refused).
  int cuda_device() const override { return device; }
  int device = 0;
  // Scores "into device memory" (a twin selector's host buffer): counted, and with
  // plant_device_scores negated (a wrong score of the right shape).
  bool scores_to_device() const override { return true; }
  void score_on_device(const ScoreInputs& in, bool decoding, float* device_out) const override {
    ++scored_to_device;
    score(in, decoding, device_out);
    if (plant_device_scores)
      for (int t = 0; t < in.T; ++t) device_out[t] = -device_out[t];
  }
  bool plant_device_scores = false;
  mutable int64_t scored_to_device = 0;  // score_on_device calls
  mutable int64_t scored_in_place = 0;          // score calls that got A as device memory
  mutable int64_t scored_current_in_place = 0;  // ... A_now
  mutable int64_t scored_rows_in_place = 0;     // ... K, V, K_pre or out_norm_l1 (from the decoder's cached rows)
  mutable int64_t scored_norms_in_place = 0;    // ... key_norm or value_norm (the decoder's row norms)
  mutable int64_t scored_accumulated_in_place = 0;  // ... A_acc (held by the engine's device store)
  mutable int64_t scored_positions_in_place = 0;    // ... the decoder's device cache's positions
  mutable int64_t scored_hidden_in_place = 0;       // ... hidden[c, t] (the decoder's block)
  mutable int64_t layer_heads_in_place = 0;     // heads handed to layer_weight with A as device memory

 private:
  const PolicyProgram& p_;
  const bool layers_on_device_;
};

}  // namespace kvevict::test
