#include "evals/config.h"

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/decode/make_decoder.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "core/util/quote.h"
#include "core/util/thread_count.h"
#include "dsl/yaml_duplicate_keys.h"
#include "evals/budget_text.h"
#include "evals/config_reader.h"
#include "evals/tasks/task.h"
#include "evals/text_hash.h"

namespace kvevict::evals {
namespace {

std::vector<std::string> split_dotted(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  std::string part;
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

std::string policy_label(const PolicyChoice& choice) {
  std::string label = std::filesystem::path(choice.policy).stem().string();
  if (choice.policy.find('/') == std::string::npos) label = choice.policy;
  if (!choice.params.empty()) {
    label += "(";
    bool first = true;
    for (const auto& [k, v] : choice.params) {
      label += (first ? "" : ",") + k + "=" + v;
      first = false;
    }
    label += ")";
  }
  return label;
}

void read_policies(ConfigErrors& errors, const YAML::Node& node, const LoadConfigOptions& options, EvalConfig& config) {
  if (!node.IsDefined() || node.IsNull()) {
    errors.error(node, "policies", "missing required key (a list of policy names or files)");
    return;
  }
  if (!node.IsSequence()) {
    errors.error(node, "policies", "expected a list of policy names, paths or {policy, label, params} mappings");
    return;
  }
  std::set<std::string> labels;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    std::string path = "policies[" + std::to_string(i) + "]";
    PolicyChoice choice;
    if (item.IsScalar()) {
      choice.policy = item.Scalar();
    } else if (item.IsMap()) {
      MapReader reader(errors, item, path);
      choice.policy = reader.get_string("policy", "", true);
      choice.label = reader.get_string("label", "");
      YAML::Node params = reader.raw("params");
      if (params.IsDefined() && !params.IsNull()) {
        if (!params.IsMap()) {
          errors.error(params, path + ".params", "expected a mapping of parameter names to values");
        } else {
          for (auto it = params.begin(); it != params.end(); ++it) {
            if (!it->second.IsScalar()) {
              errors.error(it->second, path + ".params." + it->first.Scalar(), "expected a scalar value");
              continue;
            }
            choice.params[it->first.Scalar()] = it->second.Scalar();
          }
        }
      }
      reader.finish();
    } else {
      errors.error(item, path, "expected a policy name, a path or a {policy, label, params} mapping");
      continue;
    }
    if (choice.policy.empty()) continue;
    if (choice.label.empty()) choice.label = policy_label(choice);
    if (!labels.insert(choice.label).second) {
      errors.error(item, path, "policy label '" + choice.label + "' appears twice (give one a `label:`)");
    }
    if (options.check_policy) {
      try {
        options.check_policy(config.model, choice);
      } catch (const Error& e) {
        errors.error(item, path, e.what());
      }
    }
    config.policies.push_back(choice);
  }
  if (node.size() == 0) errors.error(node, "policies", "the list is empty");
}

void read_budgets(ConfigErrors& errors, const YAML::Node& node, EvalConfig& config) {
  if (!node.IsDefined() || node.IsNull()) {
    errors.error(node, "budgets", "missing required key (e.g. [\"10%\", \"128\", full])");
    return;
  }
  std::vector<YAML::Node> items;
  if (node.IsSequence()) {
    for (const auto& item : node) items.push_back(item);
  } else {
    items.push_back(node);
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string path = "budgets[" + std::to_string(i) + "]";
    if (!items[i].IsScalar()) {
      errors.error(items[i], path, "expected a budget such as \"10%\", \"128\" or full");
      continue;
    }
    try {
      Budget budget = parse_budget_text(items[i].Scalar(), "");
      if (!seen.insert(budget.text).second) {
        errors.error(items[i], path, "budget '" + budget.text + "' appears twice");
        continue;
      }
      config.budgets.push_back(budget);
    } catch (const Error& e) {
      errors.error(items[i], path, e.what());
    }
  }
  if (items.empty()) errors.error(node, "budgets", "the list is empty");
}

// std::filesystem::exists throws on a name the system refuses (too long, say): a config from a
// stranger gets an error at its line instead.
bool path_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) && !ec;
}

std::set<std::string> override_paths(const std::vector<std::string>& overrides) {
  std::set<std::string> paths;
  for (const auto& assignment : overrides) paths.insert(assignment.substr(0, assignment.find('=')));
  return paths;
}

}  // namespace

std::string expand_path(const std::string& text) {
  std::string out;
  size_t i = 0;
  if (text.rfind("~/", 0) == 0 || text == "~") {
    const char* home = std::getenv("HOME");
    out = home ? home : "";
    i = 1;
  }
  while (i < text.size()) {
    if (text[i] != '$') {
      out += text[i++];
      continue;
    }
    std::string name, fallback;
    bool has_fallback = false;
    if (i + 1 < text.size() && text[i + 1] == '{') {
      size_t close = text.find('}', i);
      if (close == std::string::npos) {
        out += text.substr(i);
        break;
      }
      std::string inside = text.substr(i + 2, close - i - 2);
      size_t dash = inside.find(":-");
      name = inside.substr(0, dash);
      if (dash != std::string::npos) {
        has_fallback = true;
        fallback = inside.substr(dash + 2);
      }
      i = close + 1;
    } else {
      size_t j = i + 1;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      name = text.substr(i + 1, j - i - 1);
      i = j;
      if (name.empty()) {
        out += '$';
        continue;
      }
    }
    const char* value = std::getenv(name.c_str());
    if (value && *value) out += value;
    else if (has_fallback) out += expand_path(fallback);
  }
  return out;
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw UsageError("--set " + assignment + ": error: expected key.path=value");
  }
  std::string key = assignment.substr(0, equals);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(equals + 1));
  } catch (const YAML::Exception& e) {
    throw UsageError("--set " + key + ": error: the value is not valid YAML: " + e.msg);
  }
  auto parts = split_dotted(key);
  for (const auto& part : parts) {
    if (part.empty()) throw UsageError("--set " + key + ": error: empty key component");
  }
  // yaml-cpp nodes are handles: walking with operator[] on a copy writes through to `root`.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node current = chain.back();
    YAML::Node next = current[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      current[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = current[parts[i]];
    } else if (!next.IsMap()) {
      throw UsageError("--set " + key + ": error: '" + parts[i] + "' is not a mapping");
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
}

namespace {

// prefill_attention: own | flashinfer. The names are ModeNames<PrefillAttention>'s (generate's
// --prefill-attention reads the same list), so a kernel added there is accepted here too.
void read_prefill_attention(MapReader& top, EvalConfig& config) {
  const auto& names = ModeNames<PrefillAttention>::names;
  const std::string name =
      top.get_choice("prefill_attention", std::string(names[0]), std::vector<std::string>(names.begin(), names.end()));
  config.prefill_attention = parse_prefill_attention(name, "prefill_attention");  // get_choice checked the name
  config.prefill_attention_where = top.errors().where(top.raw("prefill_attention"), "prefill_attention");
}

// prefill: auto | shared | per_run (ModeNames<PrefillMode>), read once into the enum.
void read_prefill_mode(MapReader& top, EvalConfig& config) {
  const auto& names = ModeNames<PrefillMode>::names;
  const std::string name =
      top.get_choice("prefill", std::string(names[0]), std::vector<std::string>(names.begin(), names.end()));
  // One of the names: get_choice records any other text as an error at the key and returns auto.
  parse_mode(name, config.prefill);
}

// precision: { half_width: points, over: task | suite }
void read_precision(MapReader& top, EvalConfig& config) {
  if (!top.has("precision")) return;
  YAML::Node node = top.raw("precision");
  MapReader reader(top.errors(), node, "precision");
  config.precision.half_width = reader.get_double("half_width", 0, 0.1, 100);
  if (!reader.has("half_width")) top.errors().error(node, "precision.half_width", "missing required key (points, e.g. 10)");
  config.precision.over =
      reader.get_choice("over", "task", {"task", "suite"}) == "suite" ? PrecisionScope::Suite : PrecisionScope::Task;
  // The refusal is about the width asked for: point at it (or at the --set that gave it).
  config.precision.where = top.errors().where(reader.raw("half_width"), "precision.half_width");
  reader.finish();
  top.set_resolved("precision", reader.resolved());
}

// The tasks mapping: each task's type found and its options checked (errors recorded); returns their
// resolved options by name.
YAML::Node read_tasks(ConfigErrors& errors, const YAML::Node& root, const YAML::Node& tasks, EvalConfig& config) {
  YAML::Node resolved_tasks(YAML::NodeType::Map);
  if (!tasks.IsDefined() || tasks.IsNull()) {
    errors.error(root, "tasks", "missing required key (a mapping of task names to options)");
  } else if (!tasks.IsMap() || tasks.size() == 0) {
    errors.error(tasks, "tasks", "expected a non-empty mapping of task names to their options");
  } else {
    for (auto it = tasks.begin(); it != tasks.end(); ++it) {
      TaskConfig task;
      task.name = it->first.Scalar();
      task.where = "tasks." + task.name;
      MapReader reader(errors, it->second, task.where);
      task.type = reader.has("type") ? reader.get_string("type", task.name) : task.name;
      const TaskType* type = find_task_type(task.type);
      if (!type) {
        std::string known;
        for (const auto& t : task_types()) known += (known.empty() ? "" : ", ") + t.name;
        errors.error(reader.has("type") ? reader.raw("type") : it->first, task.where,
                     "unknown task type '" + task.type + "' (known: " + known + ")");
        continue;
      }
      type->make(reader, task.name);  // validates the options, recording errors
      reader.finish();
      task.options = it->second;
      YAML::Node resolved = reader.resolved();
      resolved["type"] = task.type;
      resolved_tasks[task.name] = resolved;
      config.tasks.push_back(task);
    }
  }
  return resolved_tasks;
}

// The resolved config as YAML (what the run hashes and records): the top-level keys as resolved,
// the tasks', the policies with their parameters and labels, the budgets.
std::string resolved_config_yaml(YAML::Node resolved, const YAML::Node& resolved_tasks, const EvalConfig& config) {
  resolved["tasks"] = resolved_tasks;
  YAML::Node policies(YAML::NodeType::Sequence);
  for (const auto& choice : config.policies) {
    YAML::Node entry(YAML::NodeType::Map);
    entry["policy"] = choice.policy;
    entry["label"] = choice.label;
    YAML::Node params(YAML::NodeType::Map);
    for (const auto& [k, v] : choice.params) params[k] = v;
    entry["params"] = params;
    policies.push_back(entry);
  }
  resolved["policies"] = policies;
  YAML::Node budgets(YAML::NodeType::Sequence);
  for (const auto& budget : config.budgets) budgets.push_back(budget.text);
  budgets.SetStyle(YAML::EmitterStyle::Flow);
  resolved["budgets"] = budgets;
  YAML::Emitter emitter;
  emitter << resolved;
  return std::string(emitter.c_str()) + "\n";
}

}  // namespace

EvalConfig parse_eval_config(const std::string& yaml_text, const std::string& source, const LoadConfigOptions& options) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw UsageError(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                     ": error: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  dsl::reject_duplicate_keys(root, source);  // before overrides: they replace keys, never repeat them
  if (!root.IsMap()) {
    throw UsageError(source + ":1:1: error: an eval config is a mapping (name, model, tasks, policies, budgets, ...)");
  }
  for (const auto& assignment : options.overrides) apply_override(root, assignment);
  if (options.limit >= 0) root["limit"] = options.limit;

  ConfigErrors errors(source, override_paths(options.overrides));
  EvalConfig config;
  config.source = source;
  config.overridden = override_paths(options.overrides);
  MapReader top(errors, root, "");
  config.name = top.get_string("name", std::filesystem::path(source).stem().string());
  std::string model = top.get_string("model", "", true);
  config.model = expand_path(model);
  if (!model.empty() && config.model.rfind("fake:", 0) != 0 && config.model.rfind("synthetic:", 0) != 0 &&
      !path_exists(config.model)) {
    errors.error(top.raw("model"), "model", "model file '" + quote_input(config.model) + "' does not exist");
  }
  top.set_resolved("model", YAML::Node(config.model));
  if (top.has("tokenizer")) {
    config.tokenizer = expand_path(top.get_string("tokenizer", ""));
    if (!path_exists(config.tokenizer)) {
      errors.error(top.raw("tokenizer"), "tokenizer",
                   "tokenizer file '" + quote_input(config.tokenizer) + "' does not exist");
    }
    top.set_resolved("tokenizer", YAML::Node(config.tokenizer));
  }
  config.device = top.get_choice("device", "auto", {"auto", "cpu", "cuda"});
  // Resolved (and so hashed) only when written: configs from before the key keep their hash.
  if (top.has("scoring")) config.scoring = top.get_choice("scoring", "auto", {"auto", "interpreter", "host", "cuda"});
  if (top.has("prefill_attention")) read_prefill_attention(top, config);  // hashed only when written, as scoring
  if (top.has("prefill")) read_prefill_mode(top, config);  // hashed only when written: older configs keep their hash
  config.seed = static_cast<uint64_t>(top.get_int("seed", 0, 0, INT64_MAX));
  // More threads than cores only slows a run down (and very large counts fail inside OpenMP).
  // The one thread-count rule (core/util/thread_count.h): 0 = default, at most the machine's.
  config.threads = static_cast<int>(top.get_int("threads", 0, 0, max_threads()));
  config.kv_type = parse_kv_type(top.get_choice("kv_type", "f16", {"f16", "bf16", "f32"}), "kv_type");
  config.weights = *parse_weight_storage(top.get_choice("weights", "native", {"native", "f32"}));
  config.chat_template = top.get_choice("chat_template", "auto", {"auto", "none", "chatml"});
  config.limit = static_cast<int>(top.get_int("limit", 0, 0, 1000000000));

  const YAML::Node resolved_tasks = read_tasks(errors, root, top.raw("tasks"), config);
  read_policies(errors, top.raw("policies"), options, config);
  read_budgets(errors, top.raw("budgets"), config);
  read_precision(top, config);
  top.finish();
  errors.throw_if_any();

  config.resolved_yaml = resolved_config_yaml(top.resolved(), resolved_tasks, config);
  config.hash = sha256_text(config.resolved_yaml);
  return config;
}

void check_config_for_model(const EvalConfig& config, int64_t context_length) {
  ConfigErrors errors(config.source, config.overridden);
  errors.set_context_length(context_length);
  for (const auto& task : config.tasks) {
    MapReader reader(errors, task.options, task.where);
    if (reader.has("type")) reader.get_string("type", task.type);
    find_task_type(task.type)->make(reader, task.name);
  }
  errors.throw_if_any();
}

void check_prefill_attention(const EvalConfig& config, bool cuda_device, bool flashinfer_built) {
  if (config.prefill_attention == PrefillAttention::Own) return;  // every decoder has its own attention
  const std::string where = config.prefill_attention_where.empty() ? config.source : config.prefill_attention_where;
  const std::string head = where + ": error: prefill_attention: " + std::string(mode_name(config.prefill_attention));
  if (!cuda_device) {
    const std::string why = config.device == "auto" ? "device: auto found no usable CUDA device" : "device: " + config.device;
    throw UsageError(head + " runs on the CUDA decoder, but this run's decoder runs on the cpu (" + why +
                     "); use prefill_attention: own, or device: cuda on a machine with a GPU");
  }
  if (config.kv_type == KvType::F32) {
    throw UsageError(head + " reads a 16-bit cache, but kv_type is f32; use kv_type: f16 or bf16, or prefill_attention: own");
  }
  if (!flashinfer_built) {
    throw RuntimeError(head + " is not in this kvevict: it was built without FlashInfer (scripts/fetch-flashinfer.sh, "
                       "then cmake -DKVEVICT_FLASHINFER_DIR=<the folder it prints>; docs/CUDA.md, \"FlashInfer prefill\")");
  }
}

EvalConfig load_eval_config(const std::string& path, const LoadConfigOptions& options) {
  return parse_eval_config(read_input_file(path, InputLimits::kConfigFile, "config file"), path, options);
}

}  // namespace kvevict::evals
