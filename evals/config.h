#pragma once
// An evaluation config: a YAML file, optionally changed by `--set key=value` overrides, validated
// completely before any work starts. Every problem found is reported at once in one UsageError:
//   file:line:col: error: message        (for a value that came from the file)
//   --set key: error: message            (for a value that came from an override)
//
// Grammar of the file (all keys optional except `model`, `tasks`, `policies`, `budgets`):
//   name: text                       run name (default: the file name without extension)
//   model: path                      ~ and ${VAR} / ${VAR:-default} are expanded; must exist
//   tokenizer: path                  llama2.c checkpoints only: tokenizer file (default tokenizer.bin beside it)
//   device: auto | cpu | cuda
//   scoring: auto | interpreter | host | cuda   how policies are scored (jit/scoring_backend.h;
//                                    auto: cuda on a CUDA device, else interpreter)
//   prefill_attention: own | flashinfer   the CUDA decoder's prefill attention (core/decode/decoder.h;
//                                    default own). flashinfer rounds queries and outputs to 16 bits,
//                                    so it is hashed when written (as scoring) and recorded per run
//                                    (runs.prefill_attention); refused off a CUDA device (exit 2) and
//                                    by a build without FlashInfer (exit 1): check_prefill_attention
//   prefill: auto | shared | per_run  how each (policy, budget) gets its prefilled cache (default auto:
//                                    per_run on a CUDA device, else shared): shared evicts a restored
//                                    copy of one recorded full-cache prefill per sample; per_run prefills
//                                    the prompt again for every evicting (policy, budget) with the engine
//                                    observing (scored where the decoder runs). Hashed only when written;
//                                    the resolved mode is recorded per run (runs.prefill)
//   seed: integer >= 0               drives every task generator
//   threads: integer >= 0            0: library default
//   kv_type: f16 | bf16 | f32        element type of the KV cache (default f16; f32 is the exact reference)
//   weights: native | f32            weights in their file format (default) or dequantised (the reference)
//   chat_template: auto | none | chatml
//   limit: integer >= 0              at most N samples per grid point (0: all); --limit sets it
//   tasks: { <task name>: { <task options> } ... }       see evals/tasks/task.h for each task's keys
//   policies: [ name | path | { policy: name-or-path, label: text, params: { key: value } } ... ]
//   budgets: [ "10%" | "128" | "full" ... ]
//   precision: { half_width: points > 0, over: task | suite }   refuse samples too few for 95% intervals
//                                    that narrow (evals/precision.h); checked once the samples are planned
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/decode/decoder.h"
#include "core/decode/kv_type.h"
#include "core/model/model.h"
#include "core/engine/budget.h"
#include "core/engine/policy_modes.h"
#include "evals/precision.h"

namespace kvevict::evals {
// How the sweep prefills (the `prefill:` key; resolve_prefill_mode). Auto is only ever requested,
// never run: a runner resolves it against its device and records Shared or PerRun.
enum class PrefillMode : uint8_t { Auto, Shared, PerRun };
}  // namespace kvevict::evals

namespace kvevict {
template <> struct ModeNames<evals::PrefillMode> {
  static constexpr std::array<std::string_view, 3> names = {"auto", "shared", "per_run"};
};
static_assert(ModeNames<evals::PrefillMode>::names.size() == static_cast<size_t>(evals::PrefillMode::PerRun) + 1);
}  // namespace kvevict

namespace kvevict::evals {

// The mode a run uses for `requested`: auto is per_run on a CUDA decoder (the shared path would copy
// every prompt's K/V to the host and score there; docs/EVALUATION.md, "Config") and shared on the
// CPU (one prefill per sample instead of one per policy x budget); shared and per_run are kept.
constexpr PrefillMode resolve_prefill_mode(PrefillMode requested, bool cuda_device) {
  if (requested != PrefillMode::Auto) return requested;
  return cuda_device ? PrefillMode::PerRun : PrefillMode::Shared;
}

struct PolicyChoice {
  std::string policy;  // built-in name or path, as written
  std::string label;   // how results name it (default: the policy, plus params when given)
  std::map<std::string, std::string> params;
  // The policy's source text to compile instead of reading the file `policy` names: a replay
  // (evals/replay.h) runs exactly the text the results store kept. Never set from a config file.
  std::optional<std::string> source;
};

// One task instance: its registered type and its options, checked by the task's own validator.
struct TaskConfig {
  std::string name;     // key under `tasks:`
  std::string type;     // registry name (defaults to `name`)
  YAML::Node options;   // the task's mapping, `type` removed
  std::string where;    // path used in messages ("tasks.needle")
};

struct EvalConfig {
  std::string source;  // file path
  std::string name;
  std::string model;   // expanded path (or "fake:..." test model)
  std::string tokenizer;  // expanded path or empty
  std::string device = "auto";
  std::string scoring = "auto";
  PrefillAttention prefill_attention = PrefillAttention::Own;
  // Where `prefill_attention:` was written ("file:line:col" or "--set prefill_attention"; "" when
  // absent): the refusals that need the resolved device come after parsing and point here.
  std::string prefill_attention_where;
  PrefillMode prefill = PrefillMode::Auto;  // as written; runners resolve it (resolve_prefill_mode)
  uint64_t seed = 0;
  int threads = 0;
  KvType kv_type = KvType::F16;
  WeightStorage weights = WeightStorage::Native;
  std::string chat_template = "auto";
  int limit = 0;
  std::vector<TaskConfig> tasks;
  std::vector<PolicyChoice> policies;
  std::vector<Budget> budgets;
  PrecisionTarget precision;         // half_width 0: none asked for
  std::set<std::string> overridden;  // key paths set by --set (for messages)

  // Canonical YAML of every resolved value (defaults included, tasks' defaults filled by their
  // validators), stored with the run; `hash` is its SHA-256.
  std::string resolved_yaml;
  std::string hash;
};

struct LoadConfigOptions {
  std::vector<std::string> overrides;  // "key.path=yaml value"
  int limit = -1;                      // -1: keep the file's value
  // Extra validation of each policy entry for the config's model (e.g. loading the policy file);
  // throws UsageError with the reason, which is reported at the entry's location.
  std::function<void(const std::string& model, const PolicyChoice&)> check_policy;
};

// Reads, overrides, validates and resolves. Throws UsageError listing every problem.
EvalConfig load_eval_config(const std::string& path, const LoadConfigOptions& options = {});
EvalConfig parse_eval_config(const std::string& yaml_text, const std::string& source,
                             const LoadConfigOptions& options = {});

// Checks the tasks' options again now that the model's context (tokens; 0: unbounded) is known:
// lengths, continuations and max_length that do not fit are refused at their file:line:col. Called
// after the model loads and before the results database is touched. Throws UsageError.
void check_config_for_model(const EvalConfig& config, int64_t context_length);

// Refuses a `prefill_attention` this run cannot honour, before the model loads, instead of decoding
// with another kernel: flashinfer when the decoder does not run on a CUDA device (`cuda_device`
// false: device cpu, or auto without a usable GPU) or with an f32 cache (FlashInfer takes 16-bit
// K/V), UsageError (exit 2) at the key; flashinfer in a build without it (`flashinfer_built`,
// make_decoder.h's flashinfer_prefill_built), RuntimeError (exit 1: another build can run it).
void check_prefill_attention(const EvalConfig& config, bool cuda_device, bool flashinfer_built);

// Applies one "a.b.c=value" override to `root` (value parsed as YAML). Throws UsageError when the
// text has no '=' or the value is not valid YAML, or the path crosses a non-mapping.
void apply_override(YAML::Node& root, const std::string& assignment);

// Expands a leading ~ and $VAR, ${VAR}, ${VAR:-default}.
std::string expand_path(const std::string& text);

}  // namespace kvevict::evals
