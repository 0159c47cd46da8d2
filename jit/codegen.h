#pragma once
// CUDA code generation from a policy. The generator consumes the DSL's lowered form
// (dsl/lowered.h) and emits one kernel source per policy: the prelude (kernel_abi.h), then one
// device function per lowered node that needs one, each line preceded by `#line N "<policy
// file>"` for the expression it implements so that NVRTC's messages cite the policy's own lines,
// then KVEVICT_SCORE_ENTRY (or KVEVICT_STAGED_SCORE_ENTRY) for each indicator.
// The same text builds as host C++ (host_module.h) for the semantic check against the interpreter.
#include <map>
#include <string>
#include <vector>

#include "core/engine/signals.h"
#include "jit/kernel_abi.h"
#include "jit/loaded_tables.h"

namespace kvevict::dsl {
struct CompiledPolicy;
}

namespace kvevict::jit {

// The entry points of a generated kernel (kernel_abi.h): the prefill indicator, the decode
// indicator when the policy declares one, the channel_score program's (one thread per key
// channel, KernelOutput::Channel) when it has one, and the layer_weight program's when it has one.
inline constexpr const char* kScoreEntry = "kvevict_score";
inline constexpr const char* kDecodeScoreEntry = "kvevict_decode_score";
inline constexpr const char* kChannelScoreEntry = "kvevict_channel_score";
// The layer_weight program's entry (KernelOutput::Layer: one value per layer from every KV head).
inline constexpr const char* kLayerWeightEntry = "kvevict_layer_weight";

struct GeneratedKernel {
  std::string name;                       // program name for NVRTC, e.g. "cake.cu"
  std::string policy_file;                // the policy it came from
  std::string source;                     // complete CUDA C++ (prelude included)
  std::vector<std::string> entry_points;  // extern "C" kernels, e.g. {"kvevict_score"}
  // Tensor signals each kernel reads (indexed by TensorSignal; Position for `pos` and random()); the
  // runner checks they are given and hands a kernel these alone (inputs_read_by, kernel_abi.h), so a
  // hand-written kernel must list what it reads too.
  SignalSet score_signals{}, decode_signals{}, channel_signals{}, layer_signals{};
  // Stages of each kernel (reductions over t, normalise; kernel_abi.h): 0 = a plain per-token (or
  // per-channel) kernel; otherwise the GPU runner launches `<entry>_stages` this many times first.
  int score_stages = 0, decode_stages = 0, channel_stages = 0, layer_stages = 0;
  // The matrix stages among them (inverse(): the scratch grows by kernel_abi.h's matrix layout).
  MatrixScratch score_matrices, decode_matrices, channel_matrices;
  // How each kernel's work grows with T (work_growth.h: one head costs about T^k operations);
  // the runner refuses a call that would not finish. 1 for a hand-written per-token kernel.
  int score_work_exponent = 1, decode_work_exponent = 1, channel_work_exponent = 1;
  // Tables too large to bake into `source`: each runner fills them into its module (loaded_tables.h).
  std::vector<LoadedTable> loaded_tables;
};

// True once the generator is built in (it needs the DSL's lowered form).
bool code_generator_available();

// Loads the policy (built-in name or path; --set overrides), lowers it and generates its kernels.
// Throws UsageError for a bad policy, RuntimeError while the generator is not available.
GeneratedKernel generate_policy_cuda(const std::string& name_or_path, const std::map<std::string, std::string>& overrides,
                                     const std::vector<std::string>& policy_dirs);

// The kernels of an already compiled policy: `path` names it in messages and #line directives,
// `text` is the source it was compiled from (the lines of its programs are found there).
GeneratedKernel generate_compiled_policy_cuda(const dsl::CompiledPolicy& compiled, const std::string& path,
                                              const std::string& text);

}  // namespace kvevict::jit
