// libFuzzer target: any byte string as a LongBench JSONL file. The reader has no text-level entry
// point, so each run writes the input to <tmp>/narrativeqa.jsonl and generates the task's samples
// (token count: bytes / 4, max_length small so truncation runs). It must give samples or throw a
// kvevict::Error naming the file and line.
#include <cstddef>
#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/util/error.h"
#include "evals/config_reader.h"
#include "evals/tasks/task.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = kvevict::fuzz::fuzz_dir();
  kvevict::fuzz::write_file(dir / "narrativeqa.jsonl", data, size);
  YAML::Node options;
  options["path"] = dir.string();
  options["datasets"].push_back("narrativeqa");
  options["samples"] = 8;
  options["max_length"] = 64;
  kvevict::evals::ConfigErrors errors("fuzz.yaml", {});
  kvevict::evals::MapReader reader(errors, options, "tasks.longbench");
  auto task = kvevict::evals::find_task_type("longbench")->make(reader, "longbench");
  reader.finish();
  // The options above are valid; reading them also opens the dataset file, and refuses one that
  // is empty or holds no record (an error naming the file, as it must be): nothing to generate.
  if (!errors.empty()) return 0;
  kvevict::evals::TaskContext context;
  context.count_tokens = [](std::string_view text) { return static_cast<int>(text.size() / 4); };
  try {
    (void)task->generate(context);
  } catch (const kvevict::Error&) {
  }
  return 0;
}
