// kv_retrieval: a JSON object of random hexadecimal keys and values fills the context; the question
// asks for the value of one key (RULER / InfiniteBench style). Every pair looks alike, so a policy
// cannot guess which entries matter without the question: the hardest case for eviction.
// Options: lengths, depths (percent position of the asked pair; default a seeded random one), samples, question.
#include <set>

#include "evals/tasks/grid_task.h"
#include "evals/tasks/task_types.h"
#include "evals/util/rng.h"

namespace kvevict::evals {
namespace {

std::string hex_word(Rng& rng, int digits) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < digits; ++i) out += hex[rng.below(16)];
  return out;
}

class KvRetrievalTask : public LengthDepthGridTask {
 public:
  using LengthDepthGridTask::LengthDepthGridTask;

 protected:
  void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const override {
    const std::string head = "JSON data:\n{";
    std::vector<std::string> lines;
    std::set<std::string> seen;
    int budget = sample.length - context.count_tokens(head + "}");
    int total = 0;
    while (true) {
      std::string k = hex_word(rng, 8);
      if (!seen.insert(k).second) continue;
      std::string line = "\"" + k + "\": \"" + hex_word(rng, 8) + "\"";
      int tokens = context.count_tokens(line + ", ");
      if (total + tokens > budget && !lines.empty()) break;
      lines.push_back(line);
      total += tokens;
    }
    auto assemble = [&] {
      std::string text = head;
      for (size_t j = 0; j < lines.size(); ++j) text += lines[j] + (j + 1 < lines.size() ? ", " : "");
      return text + "}";
    };
    std::string text = assemble();
    while (context.count_tokens(text) > sample.length && lines.size() > 1) {
      lines.pop_back();
      text = assemble();
    }
    const double depth = depth_or_draw(sample.depth, rng);
    size_t target = static_cast<size_t>(depth / 100.0 * (lines.size() - 1) + 0.5);
    const std::string& line = lines[target];
    std::string asked = line.substr(1, 8);
    std::string value = line.substr(line.size() - 9, 8);

    sample.context = "Extract the value corresponding to the specified key in the JSON object below.\n\n" + text;
    sample.question = "Key: \"" + asked + "\"\nThe value associated with the specified key is:";
    sample.answer_prefix = "";
    sample.references = {value};
    sample.metric = "contains";
    sample.max_new_tokens = 12;
    sample.grid = {{"length", sample.length}, {"depth", depth}, {"pairs", lines.size()},
                   {"target_pair", target}, {"context_tokens", context.count_tokens(sample.context)},
                   {"question", question_mode()}};
  }
};

}  // namespace

std::unique_ptr<Task> make_kv_retrieval_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {1024}, 32);
  auto depths = reader.get_double_list("depths", {}, 0, 100);
  CommonTaskOptions common = read_common_options(reader, 4);
  return std::make_unique<KvRetrievalTask>(instance, lengths, depths, common);
}

}  // namespace kvevict::evals
