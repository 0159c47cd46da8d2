#pragma once
// A PolicyProgram whose per-token scores, per-channel scores (channel_score) and layer weights
// (layer_weight) come from compiled kernels: on the GPU (cubin/PTX through the driver) or on the
// host (the same kernel text built by the system compiler). Everything else (the description,
// head plans, the extra select.stages programs) is delegated to the reference program, normally
// the DSL interpreter's, so the two can only differ where the kernel differs.
//
// Kernel entry points follow kernel_abi.h and codegen.h: `kvevict_score` for the prefill indicator,
// `kvevict_decode_score` for the decode indicator when the policy declares one, and
// `kvevict_channel_score` (one thread per key channel) for its channel_score program and
// `kvevict_layer_weight` (one value per layer) for its layer_weight program.
#include <memory>
#include <string>

#include "core/engine/policy_program.h"
#include "jit/codegen.h"
#include "jit/gpu_layer_weight_kernel.h"
#include "jit/gpu_score_kernel.h"
#include "jit/host_module.h"

namespace kvevict::jit {

class JitPolicyProgram : public PolicyProgram {
 public:
  // GPU: `binary` compiled from `kernel` for the current device; `ordinal` is made current on use.
  static std::unique_ptr<JitPolicyProgram> on_gpu(std::unique_ptr<PolicyProgram> reference, const GeneratedKernel& kernel,
                                                  const KernelCacheEntry& binary, int ordinal);
  // Host: `kernel`'s text compiled by the system C++ compiler in `work_dir`.
  static std::unique_ptr<JitPolicyProgram> on_host(std::unique_ptr<PolicyProgram> reference, const GeneratedKernel& kernel,
                                                   const std::string& work_dir);

  const PolicyDescription& description() const override { return reference_->description(); }
  void score(const ScoreInputs& in, bool decoding, float* out) const override;
  // The kernel's `kvevict_layer_weight` entry with the interpreter's checks (every head at the
  // same T, W and group) and its reading of the value (usable_layer_weight); a kernel without the
  // entry (a hand-written one) leaves it to the reference program. On the GPU the heads' signals
  // may be device memory (layer_weight_takes_device_signals).
  double layer_weight(const LayerWeightInputs& in) const override;
  bool layer_weight_takes_device_signals() const override { return gpu_layer_ != nullptr; }
  int window_for(int prompt_len) const override { return reference_->window_for(prompt_len); }
  PolicyProtect protect_for(int prompt_len) const override { return reference_->protect_for(prompt_len); }
  double decode_budget_for(int prompt_len, int decode_step, double budget) const override {
    return reference_->decode_budget_for(prompt_len, decode_step, budget);
  }
  HeadPlan head_plan(const ScoreInputs& in) const override { return reference_->head_plan(in); }
  // channel_score (a vector over d, core/engine/channel_selection.h): the kernel's
  // `kvevict_channel_score` entry, out[0..head_dim); a kernel without that entry (a hand-written
  // one) leaves it to the reference program. Inputs the interpreter refuses (T < 0, group < 1,
  // W < 0, head_dim < 1) and missing signals are RuntimeErrors before anything runs.
  void channel_score(const ScoreInputs& in, float* out) const override;
  // select.stages: the kernel is the file's `score`; the extra `scores:` programs run interpreted.
  void stage_score(int program, const ScoreInputs& in, float* out) const override {
    if (program == 0) score(in, false, out);
    else reference_->stage_score(program, in, out);
  }
  // The GPU backend's scores are made on the device: select there too (layer_selector.h).
  bool scores_device_signals() const override { return host_ == nullptr; }  // the GPU backend
  int cuda_device() const override { return ordinal_; }  // -1 for the host backend
  // The GPU backend's token scores go straight into a device buffer (a selector's, for the
  // selection on the device): no synchronisation, no download.
  bool scores_to_device() const override { return host_ == nullptr; }
  void score_on_device(const ScoreInputs& in, bool decoding, float* device_out) const override;
  SelectionDevice selection_device() const override {
    return ordinal_ >= 0 ? SelectionDevice::Cuda : SelectionDevice::Host;
  }
  std::string check_geometry(const ModelGeometry& model) const override {
    return reference_->check_geometry(model);
  }

 private:
  explicit JitPolicyProgram(std::unique_ptr<PolicyProgram> reference) : reference_(std::move(reference)) {}
  bool has_entry(const GeneratedKernel& kernel, const std::string& name) const;

  // Throws RuntimeError when `in` lacks a signal the kernel reads (a kernel would fault instead);
  // nothing is checked when the entry writes no output (`output`'s extent is 0).
  void check_signals(const ScoreInputs& in, const SignalSet& signals, KernelOutput output) const;
  // score()'s and score_on_device()'s checks (RuntimeError); whether the decode entry scores `in`.
  bool checked_decode_entry(const ScoreInputs& in, bool decoding) const;
  void refuse_device_signals_on_host(const ScoreInputs& in) const;  // std::logic_error when any is set

  std::unique_ptr<PolicyProgram> reference_;
  SignalSet score_signals_{}, decode_signals_{}, channel_signals_{}, layer_signals_{};
  // How each kernel's work grows with T (work_growth.h): a call that would not finish is refused.
  int score_work_ = 1, decode_work_ = 1, channel_work_ = 1;
  int ordinal_ = -1;
  // GPU backend (mutable: buffers are reused across calls; score() is const in the interface).
  mutable std::unique_ptr<GpuScoreKernel> gpu_score_, gpu_decode_, gpu_channel_;
  mutable std::unique_ptr<GpuLayerWeightKernel> gpu_layer_;
  // Host backend.
  std::unique_ptr<HostModule> host_;
  using HostEntry = void (*)(const KvScoreArgs*, float*);
  HostEntry host_score_ = nullptr, host_decode_ = nullptr, host_channel_ = nullptr, host_layer_ = nullptr;
};

}  // namespace kvevict::jit
