// needle: NeedleBench-style retrieval. Single needle (needles: 1) at each grid depth, or several
// needles (needles: N) where needle k sits at depth d + k * (100 - d) / N, as NeedleBench spreads
// multi-needle insertions from the grid depth to the end. Every needle is a generated fact about a
// generated person; the question asks for all of them; the score is the share of answers found.
// Options: lengths, depths (percent), needles, samples, question.
#include "evals/tasks/filler.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

const char* const kNames[] = {"Elara", "Tomasz", "Ingrid", "Kofi", "Mirela", "Anders", "Yuki", "Farida",
                              "Baptiste", "Noor", "Silvio", "Hanne", "Dmitri", "Lucia", "Oskar", "Priya"};
const char* const kThings[] = {"colour", "fruit", "instrument", "city", "animal", "flower", "gemstone", "spice"};
const char* const kValues[] = {"turquoise", "pomegranate", "bassoon", "Valparaiso", "pangolin", "edelweiss",
                               "tourmaline", "cardamom", "vermilion", "persimmon", "harpsichord", "Ljubljana",
                               "axolotl", "hellebore", "chrysoberyl", "sumac", "saffron", "ocarina",
                               "Trondheim", "capybara"};

class NeedleTask : public Task {
 public:
  NeedleTask(std::string name, std::vector<int64_t> lengths, std::vector<double> depths, int needles,
             CommonTaskOptions common)
      : name_(std::move(name)), lengths_(std::move(lengths)), depths_(std::move(depths)), needles_(needles),
        common_(common) {}

  std::vector<Sample> generate(const TaskContext& context) const override {
    std::vector<Sample> samples;
    const int per_point = context.limit > 0 ? std::min(context.limit, common_.samples) : common_.samples;
    for (int64_t length : lengths_) {
      for (double depth : depths_) {
        for (int i = 0; i < per_point; ++i) {
          std::string key = "len=" + std::to_string(length) + "/depth=" + format_depth(depth) + "/i=" + std::to_string(i);
          Rng rng(derive_seed(context.seed, name_ + "/" + key));
          std::vector<std::string> needles, answers, asks;
          std::vector<double> needle_depths;
          std::vector<size_t> used_names, used_things, used_values;
          for (int k = 0; k < needles_; ++k) {
            // Distinct people and things, so each question has one answer.
            size_t person, thing;
            do person = rng.below(std::size(kNames)); while (contains(used_names, person));
            do thing = rng.below(std::size(kThings)); while (contains(used_things, thing) && used_things.size() < std::size(kThings));
            used_names.push_back(person);
            used_things.push_back(thing);
            size_t value_index;
            do value_index = rng.below(std::size(kValues)); while (contains(used_values, value_index));
            used_values.push_back(value_index);
            std::string value = kValues[value_index];
            needles.push_back(std::string(kNames[person]) + "'s favourite " + kThings[thing] + " is " + value + ".");
            answers.push_back(value);
            asks.push_back(std::string(kNames[person]) + "'s favourite " + kThings[thing]);
            needle_depths.push_back(depth + k * (100.0 - depth) / needles_);
          }
          int needle_tokens = 0;
          for (const auto& needle : needles) needle_tokens += context.count_tokens(" " + needle);
          Haystack haystack = build_haystack(FillerStyle::Essay, rng, context.count_tokens,
                                             std::max<int>(1, static_cast<int>(length) - needle_tokens));
          PlacedText placed = fit_to_length(haystack, needles, needle_depths, context.count_tokens, static_cast<int>(length));

          Sample sample;
          sample.task = name_;
          sample.key = key;
          sample.length = static_cast<int>(length);
          sample.depth = depth;
          sample.index = i;
          sample.context = placed.text;
          std::string question = "What is ";
          for (size_t k = 0; k < asks.size(); ++k) {
            question += (k == 0 ? "" : (k + 1 == asks.size() ? " and " : ", ")) + asks[k];
          }
          sample.question = "Based on the text above, answer briefly. " + question + "?";
          sample.answer_prefix = "";
          sample.query_aware = common_.query_aware;
          sample.references = answers;
          sample.metric = "contains_all";
          sample.max_new_tokens = 8 + 8 * needles_;
          sample.grid = {{"length", length},
                         {"depth", depth},
                         {"needles", needles_},
                         {"needle_depths", needle_depths},
                         {"context_tokens", placed.total_tokens},
                         {"needle_token_offsets", placed.needle_token_offsets},
                         {"question", common_.query_aware ? "query_aware" : "agnostic"}};
          samples.push_back(std::move(sample));
        }
      }
    }
    return samples;
  }

 private:
  static bool contains(const std::vector<size_t>& list, size_t value) {
    for (size_t v : list) {
      if (v == value) return true;
    }
    return false;
  }
  std::string name_;
  std::vector<int64_t> lengths_;
  std::vector<double> depths_;
  int needles_;
  CommonTaskOptions common_;
};

}  // namespace

std::unique_ptr<Task> make_needle_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {1024}, 32);
  auto depths = reader.get_double_list("depths", {0, 25, 50, 75, 100}, 0, 100);
  int needles = static_cast<int>(reader.get_int("needles", 1, 1, 8));
  CommonTaskOptions common = read_common_options(reader, 1);
  return std::make_unique<NeedleTask>(instance, lengths, depths, needles, common);
}

}  // namespace kvevict::evals
