#pragma once
// The one place that decides how a policy's per-token scores are computed (issue 10, item 1).
// A run chooses its backend once, from `--scoring` (or an eval config's `scoring:`) and the device
// the decoder runs on; generate, inspect and eval all build their policy program here.
//
//   interpreter  the DSL interpreter on the CPU (dsl/interpreter.h): the reference.
//   host         the generated kernel text (jit/codegen.h) built by the system C++ compiler and
//                run on the CPU: the semantic check of the code generator, on any machine.
//   cuda         the generated kernels compiled by NVRTC for the device (kernel cache as for
//                `kvevict compile`) and run on that GPU.
//   auto         cuda when the decoder runs on a CUDA device, else interpreter.
//
// There is no silent fallback: `cuda` without a CUDA device is a usage error, and a kernel that
// cannot be generated or compiled is an error of its own (GenerateError / CompileError: exit 2;
// no NVRTC or no driver: RuntimeError, exit 1), never a quiet switch to the interpreter.
#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine/policy_modes.h"
#include "core/engine/policy_program.h"
#include "jit/device.h"

namespace kvevict::dsl {
struct CompiledPolicy;
}

namespace kvevict {

namespace jit {
enum class ScoringBackend : uint8_t { Interpreter, HostKernel, CudaKernel };
}

template <> struct ModeNames<jit::ScoringBackend> {
  static constexpr std::array<std::string_view, 3> names = {"interpreter", "host", "cuda"};
};
static_assert(ModeNames<jit::ScoringBackend>::names.size() == static_cast<size_t>(jit::ScoringBackend::CudaKernel) + 1);

namespace jit {

// "auto" or a backend's name (ModeNames<ScoringBackend>), resolved against the device the decoder
// uses. Throws UsageError naming `option` ("--scoring", "scoring") for an unknown value and for
// cuda on a CPU device.
ScoringBackend resolve_scoring(std::string_view request, const DeviceChoice& device, const std::string& option);

// The program that scores `compiled` on `backend`. `path` names the policy file in messages and
// #line directives; `text` is the file's text (the lines of its `score:` / `decode_score:` keys are
// found in it, so a stored source compiles the same as its file). `device` gives the CUDA device
// and its architecture for CudaKernel. Every other part of the policy (description, layer
// weights, windows) is the interpreter's in all backends, so backends can differ only in scores.
std::unique_ptr<PolicyProgram> make_scoring_program(dsl::CompiledPolicy compiled, const std::string& path,
                                                    const std::string& text, ScoringBackend backend,
                                                    const DeviceChoice& device);

// load_policy (dsl/policy_loader.h) followed by make_scoring_program: resolves the name, reads the
// file once (bounded, regular files only) and compiles that text.
std::unique_ptr<PolicyProgram> load_scored_policy(const std::string& name_or_path,
                                                  const std::map<std::string, std::string>& overrides,
                                                  const std::vector<std::string>& extra_dirs, ScoringBackend backend,
                                                  const DeviceChoice& device);

}  // namespace jit
}  // namespace kvevict
