// ruler_niah: RULER's needle-in-a-haystack variants (Hsieh et al. 2024, reimplemented). `keys`
// needles with distinct keys (word pairs such as "tiger-spoon") each hold `values` values;
// `queries` of the keys are asked at once, and every value of every asked key must be returned
// (score: share found). keys > 1 is multi-key (the others are distractors), values > 1
// multi-value, queries > 1 multi-query. Values are 7-digit numbers, words or UUIDs. The grid depth
// places the first asked needle; every other needle goes to a seeded random depth.
// Options: lengths, depths (default: a seeded random depth), keys, values, queries,
//          value_type (number|word|uuid), haystack (essay|noise), samples, question.
#include <algorithm>
#include <set>

#include "evals/tasks/grid_task.h"
#include "evals/tasks/ruler_words.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

enum class ValueType { Number, Word, Uuid };

struct NiahOptions {
  int keys = 1;
  int values = 1;
  int queries = 1;
  ValueType value_type = ValueType::Number;
  FillerStyle haystack = FillerStyle::Essay;
};

constexpr int kMaxNeedles = 64;  // keys x values

const char* kind_of(ValueType type) {
  switch (type) {
    case ValueType::Number: return "number";
    case ValueType::Word: return "word";
    case ValueType::Uuid: return "UUID";
  }
  return "";
}

class RulerNiahTask : public LengthDepthGridTask {
 public:
  RulerNiahTask(std::string name, std::vector<int64_t> lengths, std::vector<double> depths, NiahOptions options,
                CommonTaskOptions common)
      : LengthDepthGridTask(std::move(name), std::move(lengths), std::move(depths), common), options_(options) {}

 protected:
  void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const override {
    const int K = options_.keys, V = options_.values;
    const bool word_values = options_.value_type == ValueType::Word;
    // Key words and word values are drawn together, so no value is part of a key.
    const std::vector<std::string> words = ruler::draw_words(rng, 2 * K + (word_values ? K * V : 0));
    std::vector<std::string> keys;
    for (int k = 0; k < K; ++k) keys.push_back(words[2 * k] + "-" + words[2 * k + 1]);
    std::vector<std::vector<std::string>> values(K);
    std::set<std::string> seen;
    for (int k = 0; k < K; ++k) {
      for (int v = 0; v < V; ++v) {
        std::string value;
        do {
          if (word_values) value = words[2 * K + k * V + v];
          else value = options_.value_type == ValueType::Number ? ruler::seven_digit_number(rng) : ruler::uuid(rng);
        } while (!seen.insert(value).second);
        values[k].push_back(value);
      }
    }
    std::vector<int> order(K);
    for (int k = 0; k < K; ++k) order[k] = k;
    for (int k = K - 1; k > 0; --k) std::swap(order[k], order[rng.below(k + 1)]);
    const std::vector<int> asked(order.begin(), order.begin() + options_.queries);

    const std::string kind = kind_of(options_.value_type);
    const double depth = depth_or_draw(sample.depth, rng);
    std::vector<std::string> needles;
    std::vector<double> depths;
    for (int k = 0; k < K; ++k) {
      for (int v = 0; v < V; ++v) {
        needles.push_back((V > 1 ? "One secret " : "The secret ") + kind + " of " + keys[k] + " is " + values[k][v] + ".");
        depths.push_back(k == asked[0] && v == 0 ? depth : static_cast<double>(rng.below(101)));
      }
    }
    const std::string header = "Secret " + kind + "s are scattered through the text below. Remember each one and "
                               "whose it is; a question about them follows.\n";
    ruler::FittedContext fitted = ruler::fit_needles_in_filler(options_.haystack, rng, context.count_tokens, header,
                                                              needles, depths, sample.length, name() + " " + sample.key);

    std::vector<std::string> asked_keys;
    for (int k : asked) {
      asked_keys.push_back(keys[k]);
      sample.references.insert(sample.references.end(), values[k].begin(), values[k].end());
    }
    const bool single = sample.references.size() == 1;
    sample.context = fitted.text;
    sample.question = single ? "What is the secret " + kind + " of " + keys[asked[0]] + " given in the text above?"
                             : "List every secret " + kind + " of " + ruler::join_and(asked_keys) +
                                   " given in the text above.";
    sample.answer_prefix = single ? "The secret " + kind + " of " + keys[asked[0]] + " is"
                                  : "The secret " + kind + "s of " + ruler::join_and(asked_keys) + " are:";
    sample.metric = "contains_all";
    sample.max_new_tokens = ruler::answer_token_budget(context.count_tokens, sample.references);

    nlohmann::json placed = nlohmann::json::array();
    for (int k = 0, i = 0; k < K; ++k) {
      for (int v = 0; v < V; ++v, ++i) {
        placed.push_back({{"key", keys[k]}, {"value", values[k][v]}, {"depth", depths[i]},
                          {"token_offset", fitted.needle_offsets[i]},
                          {"asked", std::find(asked.begin(), asked.end(), k) != asked.end()}});
      }
    }
    sample.grid = {{"length", sample.length},
                   {"depth", depth},
                   {"keys", K},
                   {"values", V},
                   {"queries", options_.queries},
                   {"value_type", kind},
                   {"haystack", options_.haystack == FillerStyle::Essay ? "essay" : "noise"},
                   {"context_tokens", fitted.tokens},
                   {"needles", placed},
                   {"question", question_mode()}};
  }

 private:
  NiahOptions options_;
};

}  // namespace

std::unique_ptr<Task> make_ruler_niah_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {4096}, 128);
  auto depths = reader.get_double_list("depths", {}, 0, 100);
  NiahOptions options;
  options.keys = static_cast<int>(reader.get_int("keys", 1, 1, 32));
  options.values = static_cast<int>(reader.get_int("values", 1, 1, 16));
  options.queries = static_cast<int>(reader.get_int("queries", 1, 1, 32));
  if (options.queries > options.keys) {
    reader.errors().error(reader.raw("queries"), reader.path_of("queries"),
                          std::to_string(options.queries) + " queries ask for more keys than the " +
                              std::to_string(options.keys) + " given by `keys`");
    options.queries = options.keys;
  }
  if (options.keys * options.values > kMaxNeedles) {
    reader.errors().error(reader.raw("values"), reader.path_of("values"),
                          "keys x values = " + std::to_string(options.keys * options.values) + " needles; at most " +
                              std::to_string(kMaxNeedles));
  }
  const std::string type = reader.get_choice("value_type", "number", {"number", "word", "uuid"});
  options.value_type = type == "word" ? ValueType::Word : type == "uuid" ? ValueType::Uuid : ValueType::Number;
  options.haystack = reader.get_choice("haystack", "essay", {"essay", "noise"}) == "noise" ? FillerStyle::Repetitive
                                                                                            : FillerStyle::Essay;
  CommonTaskOptions common = read_common_options(reader, 4);
  return std::make_unique<RulerNiahTask>(instance, lengths, depths, options, common);
}

}  // namespace kvevict::evals
