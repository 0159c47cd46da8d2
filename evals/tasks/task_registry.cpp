// The registry of task types: one line per task.
#include <cstdio>

#include "evals/tasks/task_types.h"

namespace kvevict::evals {

const std::vector<TaskType>& task_types() {
  static const std::vector<TaskType> types = {
      {"passkey", "a number hidden in filler text, retrieved at the end", make_passkey_task},
      {"needle", "NeedleBench-style single/multi-needle retrieval over lengths x depths", make_needle_task},
      {"kv_retrieval", "find the value of one key among many random key/value pairs", make_kv_retrieval_task},
      {"fidelity", "teacher-forced KL / top-1 agreement and greedy agreement vs the full cache", make_fidelity_task},
      {"longbench", "LongBench JSONL files from a local folder, LongBench prompts and metrics", make_longbench_task},
      {"ruler_niah", "RULER needle-in-a-haystack: multi-key, multi-value, multi-query; number, word or UUID values", make_ruler_niah_task},
      {"ruler_vt", "RULER variable tracking: name every variable a chain of assignments gives a value", make_ruler_vt_task},
      {"ruler_cwe", "RULER common words extraction: the most common words of a numbered word list", make_ruler_cwe_task},
      {"ruler_fwe", "RULER frequent words extraction: the 3 most frequent words of a Zipf-drawn sequence", make_ruler_fwe_task},
  };
  return types;
}

const TaskType* find_task_type(const std::string& name) {
  for (const auto& type : task_types()) {
    if (type.name == name) return &type;
  }
  return nullptr;
}

CommonTaskOptions read_common_options(MapReader& reader, int default_samples) {
  CommonTaskOptions common;
  common.samples = static_cast<int>(reader.get_int("samples", default_samples, 1, 1000000));
  common.query_aware = reader.get_choice("question", "agnostic", {"query_aware", "agnostic"}) == "query_aware";
  return common;
}

std::string format_depth(double depth) {
  if (depth < 0) return "random";
  char text[32];
  std::snprintf(text, sizeof(text), "%g", depth);
  return text;
}

}  // namespace kvevict::evals
