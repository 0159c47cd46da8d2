#pragma once
// One evaluation sample, as a task generates it: the text to compress, the question, the expected
// answers and how to score them. The runner turns it into a prompt with the model's chat template.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvevict::evals {

struct Sample {
  std::string task;   // task instance name (key under `tasks:`)
  std::string key;    // unique within the task for one config, e.g. "len=1024/depth=50/i=0"
  int length = 0;     // grid length in tokens (0 when the task has no length axis)
  double depth = -1;  // grid depth in percent (-1 when the task has no depth axis)
  int index = 0;      // sample index within its grid point
  nlohmann::json grid;  // every grid coordinate and measured facts (actual tokens, needle offsets)

  std::string context;        // the part that is compressed
  std::string question;       // query-aware: compressed with the context; agnostic: appended after eviction
  std::string separator = "\n\n";  // between context and question in the user message
  std::string answer_prefix;  // appended after the chat template's assistant header
  bool first_line_only = false;  // score only the prediction's first line (LongBench few-shot tasks)
  bool query_aware = false;
  std::vector<std::string> references;
  std::string metric;  // a name from evals/metrics/score.h
  int max_new_tokens = 16;
  std::vector<std::string> all_classes;  // classification metrics only

  // Fidelity samples: teacher-forced continuation compared token by token with the full cache.
  bool fidelity = false;
  std::string continuation;
  int greedy_tokens = 0;
};

}  // namespace kvevict::evals
