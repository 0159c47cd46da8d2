// passkey: a 5-digit number hidden in repetitive filler, asked for at the end (Mohtashami & Jaggi).
// Options: lengths [tokens], depths [percent; default: a seeded random depth per sample],
//          samples, question (query_aware|agnostic).
#include "evals/tasks/filler.h"
#include "evals/tasks/grid_task.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

class PasskeyTask : public LengthDepthGridTask {
 public:
  using LengthDepthGridTask::LengthDepthGridTask;

 protected:
  void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const override {
    const std::string passkey = std::to_string(10000 + rng.below(90000));
    const double depth = depth_or_draw(sample.depth, rng);
    const std::string needle = "The pass key is " + passkey + ". Remember it. " + passkey + " is the pass key.";
    const int needle_tokens = context.count_tokens(" " + needle);
    Haystack haystack = build_haystack(FillerStyle::Repetitive, rng, context.count_tokens,
                                       std::max<int>(1, sample.length - needle_tokens));
    PlacedText placed = fit_to_length(haystack, {needle}, {depth}, context.count_tokens, sample.length);
    sample.context = "There is important information hidden inside a lot of irrelevant text. Find it and "
                     "memorize it.\n" + placed.text;
    sample.question = "What is the pass key? Answer with the number only.";
    sample.answer_prefix = "";
    sample.references = {passkey};
    sample.metric = "contains";
    sample.max_new_tokens = 16;  // SmolLM2 spells numbers digit by digit
    sample.grid = {{"length", sample.length},
                   {"depth", depth},
                   {"context_tokens", placed.total_tokens},
                   {"needle_token_offset", placed.needle_token_offsets[0]},
                   {"question", question_mode()}};
  }
};

}  // namespace

std::unique_ptr<Task> make_passkey_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {1024}, 16);
  auto depths = reader.get_double_list("depths", {}, 0, 100);
  CommonTaskOptions common = read_common_options(reader, 4);
  return std::make_unique<PasskeyTask>(instance, lengths, depths, common);
}

}  // namespace kvevict::evals
