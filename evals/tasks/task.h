#pragma once
// Tasks generate samples. Each task type lives in its own file and has one line in the registry
// (evals/tasks/task_registry.cpp). A task reads its options strictly (unknown keys are errors),
// and must be deterministic: the same options, seed and tokenizer give the same samples.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "evals/config_reader.h"
#include "evals/tasks/sample.h"

namespace kvevict::evals {

// Counts tokens of `text` with the model's tokenizer (no BOS).
using TokenCounter = std::function<int(std::string_view text)>;

struct TaskContext {
  uint64_t seed = 0;
  int limit = 0;  // > 0: at most `limit` samples per grid point
  TokenCounter count_tokens;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::vector<Sample> generate(const TaskContext& context) const = 0;
};

struct TaskType {
  std::string name;
  std::string about;
  // Reads the task's options (recording errors in `reader`) and returns the task.
  std::function<std::unique_ptr<Task>(MapReader& reader, const std::string& instance)> make;
};

const std::vector<TaskType>& task_types();
const TaskType* find_task_type(const std::string& name);

// Options every task shares: `samples` (per grid point) and `question: query_aware|agnostic`.
struct CommonTaskOptions {
  int samples = 1;
  bool query_aware = false;
};
CommonTaskOptions read_common_options(MapReader& reader, int default_samples);

}  // namespace kvevict::evals
