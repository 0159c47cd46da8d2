// JitPolicyProgram; see jit_policy_program.h.
#include "jit/jit_policy_program.h"

#include <algorithm>

#include "core/util/error.h"

namespace kvevict::jit {

bool JitPolicyProgram::has_entry(const GeneratedKernel& kernel, const std::string& name) const {
  return std::find(kernel.entry_points.begin(), kernel.entry_points.end(), name) != kernel.entry_points.end();
}

std::unique_ptr<JitPolicyProgram> JitPolicyProgram::on_gpu(std::unique_ptr<PolicyProgram> reference,
                                                          const GeneratedKernel& kernel, const KernelCacheEntry& binary,
                                                          int ordinal) {
  std::unique_ptr<JitPolicyProgram> program(new JitPolicyProgram(std::move(reference)));
  program->ordinal_ = ordinal;
  use_cuda_device(ordinal);
  if (!program->has_entry(kernel, kScoreEntry)) throw RuntimeError(kernel.name + ": no " + kScoreEntry + " kernel");
  program->gpu_score_ = std::make_unique<GpuScoreKernel>(binary, kScoreEntry);
  if (program->has_entry(kernel, kDecodeScoreEntry))
    program->gpu_decode_ = std::make_unique<GpuScoreKernel>(binary, kDecodeScoreEntry);
  return program;
}

std::unique_ptr<JitPolicyProgram> JitPolicyProgram::on_host(std::unique_ptr<PolicyProgram> reference,
                                                           const GeneratedKernel& kernel, const std::string& work_dir) {
  std::unique_ptr<JitPolicyProgram> program(new JitPolicyProgram(std::move(reference)));
  program->host_ = std::make_unique<HostModule>(kernel.source, work_dir, "policy");
  if (!program->has_entry(kernel, kScoreEntry)) throw RuntimeError(kernel.name + ": no " + kScoreEntry + " kernel");
  program->host_score_ = reinterpret_cast<HostEntry>(program->host_->symbol(kScoreEntry));
  if (program->has_entry(kernel, kDecodeScoreEntry))
    program->host_decode_ = reinterpret_cast<HostEntry>(program->host_->symbol(kDecodeScoreEntry));
  return program;
}

void JitPolicyProgram::score(const ScoreInputs& in, bool decoding, float* out) const {
  if (host_) {
    const HostEntry entry = decoding && host_decode_ ? host_decode_ : host_score_;
    const KvScoreArgs args = to_kernel_args(in);
    entry(&args, out);
    return;
  }
  use_cuda_device(ordinal_);
  GpuScoreKernel& kernel = decoding && gpu_decode_ ? *gpu_decode_ : *gpu_score_;
  kernel.score(in, out);
}

}  // namespace kvevict::jit
