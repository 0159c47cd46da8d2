// JitPolicyProgram; see jit_policy_program.h.
#include "jit/jit_policy_program.h"

#include <algorithm>
#include <stdexcept>

#include "core/util/error.h"
#include "jit/work_growth.h"

namespace kvevict::jit {

bool JitPolicyProgram::has_entry(const GeneratedKernel& kernel, const std::string& name) const {
  return std::find(kernel.entry_points.begin(), kernel.entry_points.end(), name) != kernel.entry_points.end();
}

std::unique_ptr<JitPolicyProgram> JitPolicyProgram::on_gpu(std::unique_ptr<PolicyProgram> reference,
                                                          const GeneratedKernel& kernel, const KernelCacheEntry& binary,
                                                          int ordinal) {
  std::unique_ptr<JitPolicyProgram> program(new JitPolicyProgram(std::move(reference)));
  program->score_signals_ = kernel.score_signals;
  program->decode_signals_ = kernel.decode_signals;
  program->channel_signals_ = kernel.channel_signals;
  program->layer_signals_ = kernel.layer_signals;
  program->score_work_ = kernel.score_work_exponent;
  program->decode_work_ = kernel.decode_work_exponent;
  program->channel_work_ = kernel.channel_work_exponent;
  program->ordinal_ = ordinal;
  use_cuda_device(ordinal);
  if (!program->has_entry(kernel, kScoreEntry)) throw RuntimeError(kernel.name + ": no " + kScoreEntry + " kernel");
  const std::vector<LoadedTable>& tables = kernel.loaded_tables;  // filled into each runner's module
  program->gpu_score_ = std::make_unique<GpuScoreKernel>(binary, kScoreEntry, kernel.score_stages, kernel.score_matrices,
                                                         KernelOutput::Token, tables);
  if (program->has_entry(kernel, kDecodeScoreEntry))
    program->gpu_decode_ = std::make_unique<GpuScoreKernel>(binary, kDecodeScoreEntry, kernel.decode_stages,
                                                            kernel.decode_matrices, KernelOutput::Token, tables);
  if (program->has_entry(kernel, kChannelScoreEntry))
    program->gpu_channel_ = std::make_unique<GpuScoreKernel>(binary, kChannelScoreEntry, kernel.channel_stages,
                                                             kernel.channel_matrices, KernelOutput::Channel, tables);
  if (program->has_entry(kernel, kLayerWeightEntry))
    program->gpu_layer_ = std::make_unique<GpuLayerWeightKernel>(binary, kLayerWeightEntry, kernel.layer_stages, tables);
  return program;
}

std::unique_ptr<JitPolicyProgram> JitPolicyProgram::on_host(std::unique_ptr<PolicyProgram> reference,
                                                           const GeneratedKernel& kernel, const std::string& work_dir) {
  std::unique_ptr<JitPolicyProgram> program(new JitPolicyProgram(std::move(reference)));
  program->score_signals_ = kernel.score_signals;
  program->decode_signals_ = kernel.decode_signals;
  program->channel_signals_ = kernel.channel_signals;
  program->layer_signals_ = kernel.layer_signals;
  program->score_work_ = kernel.score_work_exponent;
  program->decode_work_ = kernel.decode_work_exponent;
  program->channel_work_ = kernel.channel_work_exponent;
  program->host_ = std::make_unique<HostModule>(kernel.source, work_dir, "policy");
  load_tables(*program->host_, kernel.loaded_tables);
  if (!program->has_entry(kernel, kScoreEntry)) throw RuntimeError(kernel.name + ": no " + kScoreEntry + " kernel");
  program->host_score_ = reinterpret_cast<HostEntry>(program->host_->symbol(kScoreEntry));
  if (program->has_entry(kernel, kDecodeScoreEntry))
    program->host_decode_ = reinterpret_cast<HostEntry>(program->host_->symbol(kDecodeScoreEntry));
  if (program->has_entry(kernel, kChannelScoreEntry))
    program->host_channel_ = reinterpret_cast<HostEntry>(program->host_->symbol(kChannelScoreEntry));
  if (program->has_entry(kernel, kLayerWeightEntry))
    program->host_layer_ = reinterpret_cast<HostEntry>(program->host_->symbol(kLayerWeightEntry));
  return program;
}

// The host backend reads host memory: device signals handed to it are a bug of the caller.
void JitPolicyProgram::refuse_device_signals_on_host(const ScoreInputs& in) const {
  if (in.has_device_memory())
    throw std::logic_error("policy '" + description().name + "': device signals handed to the host backend");
}

void JitPolicyProgram::check_signals(const ScoreInputs& in, const SignalSet& signals, KernelOutput output) const {
  if (kernel_output_extent(to_kernel_args(in), output) <= 0) return;
  for (const TensorSignalInfo& info : kTensorSignalTable) {
    if (!signals[signal_index(info.id)] || info.id == TensorSignal::Position) continue;  // position may be null
    if (!in.signal(info.id))
      throw RuntimeError("policy '" + description().name + "' reads " + signal_label(info.id) +
                         " but the engine did not supply it");
    if ((info.axes & kAxisQ) && in.W <= 0)
      throw RuntimeError("policy '" + description().name + "' reads " + signal_label(info.id) + " but W = 0");
  }
}

bool JitPolicyProgram::checked_decode_entry(const ScoreInputs& in, bool decoding) const {
  if (in.T < 0 || in.W < 0 || in.group < 1) throw RuntimeError("policy '" + description().name + "': invalid score inputs");
  const bool use_decode = decoding && (host_ ? host_decode_ != nullptr : gpu_decode_ != nullptr);
  check_signals(in, use_decode ? decode_signals_ : score_signals_, KernelOutput::Token);
  refuse_unfinishable_work(description().name, use_decode ? decode_work_ : score_work_, in.T, in.head_dim);
  return use_decode;
}

void JitPolicyProgram::score(const ScoreInputs& in, bool decoding, float* out) const {
  const bool use_decode = checked_decode_entry(in, decoding);
  const ScoreInputs read = inputs_read_by(in, use_decode ? decode_signals_ : score_signals_);
  if (host_) {
    refuse_device_signals_on_host(in);
    const HostEntry entry = use_decode ? host_decode_ : host_score_;
    const KvScoreArgs args = to_kernel_args(read);
    entry(&args, out);
    return;
  }
  use_cuda_device(ordinal_);
  GpuScoreKernel& kernel = use_decode ? *gpu_decode_ : *gpu_score_;
  kernel.score(read, out);
}

void JitPolicyProgram::score_on_device(const ScoreInputs& in, bool decoding, float* device_out) const {
  if (host_) throw std::logic_error("policy '" + description().name + "': the host backend scores into host memory");
  const bool use_decode = checked_decode_entry(in, decoding);
  use_cuda_device(ordinal_);
  GpuScoreKernel& kernel = use_decode ? *gpu_decode_ : *gpu_score_;
  kernel.score_into(inputs_read_by(in, use_decode ? decode_signals_ : score_signals_),
                    reinterpret_cast<uint64_t>(device_out));
}

// The same checks as the interpreter's channel_score (dsl/compiled_program.cpp), then the
// kernel's channel entry on the backend the program was built for.
void JitPolicyProgram::channel_score(const ScoreInputs& in, float* out) const {
  if (host_ ? host_channel_ == nullptr : gpu_channel_ == nullptr) return reference_->channel_score(in, out);
  if (in.T < 0 || in.group < 1 || in.W < 0 || in.head_dim < 1)
    throw RuntimeError("policy '" + description().name + "': invalid channel_score inputs");
  check_signals(in, channel_signals_, KernelOutput::Channel);
  refuse_unfinishable_work(description().name, channel_work_, in.T, in.head_dim);
  const ScoreInputs read = inputs_read_by(in, channel_signals_);
  if (host_) {
    refuse_device_signals_on_host(in);
    const KvScoreArgs args = to_kernel_args(read);
    host_channel_(&args, out);
    return;
  }
  use_cuda_device(ordinal_);
  gpu_channel_->score(read, out);
}

double JitPolicyProgram::layer_weight(const LayerWeightInputs& in) const {
  if (!description().has_layer_weight) return 1.0;
  if (host_ ? host_layer_ == nullptr : gpu_layer_ == nullptr) return reference_->layer_weight(in);
  const std::string& name = description().name;
  if (in.heads.empty()) throw RuntimeError("policy '" + name + "': layer_weight needs at least one KV head");
  const ScoreInputs& h0 = in.heads[0];
  for (const ScoreInputs& h : in.heads) {
    if (h.T != h0.T || h.W != h0.W || h.group != h0.group)
      throw RuntimeError("policy '" + name + "': layer_weight needs every KV head of the layer at the same length");
    check_signals(h, layer_signals_, KernelOutput::Layer);
  }
  if (h0.T < 0 || h0.W < 0 || h0.group < 1) throw RuntimeError("policy '" + name + "': invalid layer_weight inputs");
  LayerWeightInputs read = in;
  for (ScoreInputs& h : read.heads) h = inputs_read_by(h, layer_signals_);
  float value = 0;
  if (host_) {
    for (const ScoreInputs& h : in.heads) refuse_device_signals_on_host(h);
    std::vector<KvScoreArgs> args = layer_kernel_args(read);
    for (KvScoreArgs& a : args) a.layer_heads = args.data();
    host_layer_(args.data(), &value);
  } else {
    use_cuda_device(ordinal_);
    value = gpu_layer_->run(read);
  }
  return usable_layer_weight(value);
}

}  // namespace kvevict::jit
