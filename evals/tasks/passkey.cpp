// passkey: a 5-digit number hidden in repetitive filler, asked for at the end (Mohtashami & Jaggi).
// Options: lengths [tokens], depths [percent; default: a seeded random depth per sample],
//          samples, question (query_aware|agnostic).
#include "evals/tasks/filler.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

class PasskeyTask : public Task {
 public:
  PasskeyTask(std::string name, std::vector<int64_t> lengths, std::vector<double> depths, CommonTaskOptions common)
      : name_(std::move(name)), lengths_(std::move(lengths)), depths_(std::move(depths)), common_(common) {}

  std::vector<Sample> generate(const TaskContext& context) const override {
    std::vector<Sample> samples;
    const int per_point = context.limit > 0 ? std::min(context.limit, common_.samples) : common_.samples;
    std::vector<double> depth_axis = depths_.empty() ? std::vector<double>{-1} : depths_;
    for (int64_t length : lengths_) {
      for (double grid_depth : depth_axis) {
        for (int i = 0; i < per_point; ++i) {
          std::string label = name_ + "/len=" + std::to_string(length) + "/depth=" + format_depth(grid_depth) +
                              "/i=" + std::to_string(i);
          Rng rng(derive_seed(context.seed, label));
          std::string passkey = std::to_string(10000 + rng.below(90000));
          double depth = grid_depth >= 0 ? grid_depth : static_cast<double>(rng.below(101));
          std::string needle = "The pass key is " + passkey + ". Remember it. " + passkey + " is the pass key.";
          int needle_tokens = context.count_tokens(" " + needle);
          Haystack haystack = build_haystack(FillerStyle::Repetitive, rng, context.count_tokens,
                                             std::max<int>(1, static_cast<int>(length) - needle_tokens));
          PlacedText placed = fit_to_length(haystack, {needle}, {depth}, context.count_tokens, static_cast<int>(length));

          Sample sample;
          sample.task = name_;
          sample.key = "len=" + std::to_string(length) + "/depth=" + format_depth(grid_depth) + "/i=" + std::to_string(i);
          sample.length = static_cast<int>(length);
          sample.depth = grid_depth;  // -1 when drawn at random (the drawn depth is in `grid`)
          sample.index = i;
          sample.context = "There is important information hidden inside a lot of irrelevant text. Find it and "
                           "memorize it.\n" + placed.text;
          sample.question = "What is the pass key? Answer with the number only.";
          sample.answer_prefix = "";
          sample.query_aware = common_.query_aware;
          sample.references = {passkey};
          sample.metric = "contains";
          sample.max_new_tokens = 16;  // SmolLM2 spells numbers digit by digit
          sample.grid = {{"length", length},
                         {"depth", depth},
                         {"context_tokens", placed.total_tokens},
                         {"needle_token_offset", placed.needle_token_offsets[0]},
                         {"question", common_.query_aware ? "query_aware" : "agnostic"}};
          samples.push_back(std::move(sample));
        }
      }
    }
    return samples;
  }

 private:
  std::string name_;
  std::vector<int64_t> lengths_;
  std::vector<double> depths_;
  CommonTaskOptions common_;
};

}  // namespace

std::unique_ptr<Task> make_passkey_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_int_list("lengths", {1024}, 16, 1 << 20);
  auto depths = reader.get_double_list("depths", {}, 0, 100);
  CommonTaskOptions common = read_common_options(reader, 4);
  return std::make_unique<PasskeyTask>(instance, lengths, depths, common);
}

}  // namespace kvevict::evals
