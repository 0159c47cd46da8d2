// ruler_vt: RULER's variable tracking (Hsieh et al. 2024, reimplemented). `chains` chains of
// assignments hide in the repeated noise filler: "VAR QXWTE = 48213." starts a chain, and each of
// its `hops` further statements copies the previous variable ("VAR PLMOK = VAR QXWTE."). Every
// chain starts from its own 5-digit value; the question gives the first chain's value and asks for
// every variable that holds it (hops + 1 names; score: share found). A chain's statements appear in
// order at seeded random depths; the other chains are distractors.
// Options: lengths, chains, hops, samples, question.
#include <algorithm>
#include <set>

#include "evals/tasks/grid_task.h"
#include "evals/tasks/ruler_words.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

constexpr int kMaxStatements = 256;  // chains x (hops + 1)

class RulerVtTask : public LengthDepthGridTask {
 public:
  RulerVtTask(std::string name, std::vector<int64_t> lengths, int chains, int hops, CommonTaskOptions common)
      : LengthDepthGridTask(std::move(name), std::move(lengths), {}, common), chains_(chains), hops_(hops) {}

 protected:
  void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const override {
    const std::string header = "Memorize the variable assignments hidden in the text below; a question about them "
                               "follows.\n";
    std::vector<std::string> values;
    std::set<std::string> seen_values;
    while (static_cast<int>(values.size()) < chains_) {
      std::string value = std::to_string(10000 + rng.below(90000));
      if (seen_values.insert(value).second) values.push_back(value);
    }
    const std::string question = "Which variables hold the value " + values[0] +
                                 ", directly or through a chain of assignments? List all of them.";
    const std::string prefix = "The variables that hold " + values[0] + " are:";
    // A name must not occur in any fixed text (a name such as GREEN would be found in the noise and
    // counted as an answer), nor inside another name (all have five letters, so: be distinct).
    std::string fixed = header + question + prefix;
    Rng unused(0);
    for (const auto& sentence : build_haystack(FillerStyle::Repetitive, unused, context.count_tokens, 64).sentences) {
      fixed += sentence;
    }
    fixed = ruler::lower(fixed);
    std::set<std::string> seen_names;
    std::vector<std::vector<std::string>> names(chains_);
    for (auto& chain : names) {
      while (static_cast<int>(chain.size()) <= hops_) {
        std::string name;
        for (int i = 0; i < 5; ++i) name += static_cast<char>('A' + rng.below(26));
        if (fixed.find(ruler::lower(name)) != std::string::npos || !seen_names.insert(name).second) continue;
        chain.push_back(name);
      }
    }
    std::vector<std::string> statements;
    std::vector<double> depths;
    for (int c = 0; c < chains_; ++c) {
      std::vector<double> chain_depths;
      for (int h = 0; h <= hops_; ++h) chain_depths.push_back(static_cast<double>(rng.below(101)));
      std::sort(chain_depths.begin(), chain_depths.end());  // a variable is assigned before it is copied
      for (int h = 0; h <= hops_; ++h) {
        statements.push_back("VAR " + names[c][h] + " = " + (h == 0 ? values[c] : "VAR " + names[c][h - 1]) + ".");
        depths.push_back(chain_depths[h]);
      }
    }
    ruler::FittedContext fitted = ruler::fit_needles_in_filler(FillerStyle::Repetitive, rng, context.count_tokens,
                                                              header, statements, depths, sample.length,
                                                              name() + " " + sample.key);
    sample.context = fitted.text;
    sample.question = question;
    sample.answer_prefix = prefix;
    sample.references = names[0];
    sample.metric = "contains_all";
    sample.max_new_tokens = ruler::answer_token_budget(context.count_tokens, sample.references);
    nlohmann::json chains = nlohmann::json::array();
    for (int c = 0, i = 0; c < chains_; ++c) {
      nlohmann::json chain = {{"value", values[c]}, {"names", names[c]}, {"depths", nlohmann::json::array()},
                              {"token_offsets", nlohmann::json::array()}};
      for (int h = 0; h <= hops_; ++h, ++i) {
        chain["depths"].push_back(depths[i]);
        chain["token_offsets"].push_back(fitted.needle_offsets[i]);
      }
      chains.push_back(chain);
    }
    sample.grid = {{"length", sample.length},   {"chains", chains_},
                   {"hops", hops_},             {"context_tokens", fitted.tokens},
                   {"asked_chain", 0},          {"chain_facts", chains},
                   {"question", question_mode()}};
  }

 private:
  int chains_;
  int hops_;
};

}  // namespace

std::unique_ptr<Task> make_ruler_vt_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {4096}, 128);
  const int chains = static_cast<int>(reader.get_int("chains", 1, 1, 16));
  const int hops = static_cast<int>(reader.get_int("hops", 4, 1, 32));
  if (chains * (hops + 1) > kMaxStatements) {
    reader.errors().error(reader.raw("hops"), reader.path_of("hops"),
                          "chains x (hops + 1) = " + std::to_string(chains * (hops + 1)) + " statements; at most " +
                              std::to_string(kMaxStatements));
  }
  CommonTaskOptions common = read_common_options(reader, 4);
  return std::make_unique<RulerVtTask>(instance, lengths, chains, hops, common);
}

}  // namespace kvevict::evals
