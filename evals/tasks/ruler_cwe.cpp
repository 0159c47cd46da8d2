// ruler_cwe: RULER's common words extraction (Hsieh et al. 2024, reimplemented). A numbered list
// of vocabulary words in a seeded order: `common` words appear many times each, every other word a
// few times; the question asks for the `common` most common words (score: share found). The list
// size sets the length: the largest list whose context fits the target. For n items, with R rare
// words available, a rare word appears at most r = ceil(n / (10 common + R)) times and a common word
// f = min(10 r, n / common) times (RULER: 30 and 3 at 4K): always more than any rare word.
// Options: lengths, common, samples, question.
#include <algorithm>

#include "core/util/error.h"
#include "evals/tasks/grid_task.h"
#include "evals/tasks/ruler_words.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

struct WordList {
  std::vector<std::string> items;
  int common_repeats = 0;
  int rare_max = 0;
};

class RulerCweTask : public LengthDepthGridTask {
 public:
  RulerCweTask(std::string name, std::vector<int64_t> lengths, int common, CommonTaskOptions common_options)
      : LengthDepthGridTask(std::move(name), std::move(lengths), {}, common_options), common_(common) {}

 protected:
  void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const override {
    // Every vocabulary word in a seeded order: the first `common_` are the common ones.
    const std::vector<std::string> words = ruler::draw_words(rng, ruler::vocabulary().size());
    const Rng shuffle = rng;  // each candidate size shuffles from the same state: the list is a function of n
    const std::string noun = common_ == 1 ? "word" : "words";
    const std::string header = "Below is a numbered list of words. Some words appear many times, the others only a "
                               "few times.\n";
    auto text_of = [&](const WordList& list) {
      std::string text = header;
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) text += ' ';
        text += std::to_string(i + 1);
        text += ". ";
        text += list.items[i];
      }
      return text;
    };
    auto list_of = [&](int n) {
      WordList list;
      const int rare_words = static_cast<int>(words.size()) - common_;
      const int r = (n + 10 * common_ + rare_words - 1) / (10 * common_ + rare_words);
      list.common_repeats = std::min(10 * r, n / common_);
      const int rare_total = n - common_ * list.common_repeats;
      list.rare_max = (rare_total + rare_words - 1) / rare_words;
      for (int c = 0; c < common_; ++c) list.items.insert(list.items.end(), list.common_repeats, words[c]);
      for (int j = 0; j < rare_total; ++j) list.items.push_back(words[common_ + j % rare_words]);
      Rng order = shuffle;
      for (size_t i = list.items.size(); i > 1; --i) std::swap(list.items[i - 1], list.items[order.below(i)]);
      return list;
    };
    const int n = ruler::largest_fitting(2 * common_ + 1, sample.length, sample.length,
                                         [&](int items) { return context.count_tokens(text_of(list_of(items))); });
    if (n < 2 * common_ + 1) {
      throw UsageError(name() + " " + sample.key + ": a context of " + std::to_string(sample.length) +
                       " tokens cannot hold a list in which " + std::to_string(common_) +
                       " words stand out; use a longer length or fewer common words");
    }
    const WordList list = list_of(n);
    if (list.common_repeats <= list.rare_max) {  // the formula above rules it out; a guard, not a case
      throw std::logic_error("ruler_cwe: common words would not stand out");
    }
    sample.context = text_of(list);
    sample.question = "What are the " + std::to_string(common_) + " most common " + noun +
                      " in the list above? Answer with the words only.";
    sample.answer_prefix = "The " + std::to_string(common_) + " most common " + noun + " in the list are:";
    sample.references.assign(words.begin(), words.begin() + common_);
    sample.metric = "contains_all";
    sample.max_new_tokens = ruler::answer_token_budget(context.count_tokens, sample.references);
    sample.grid = {{"length", sample.length},
                   {"common", common_},
                   {"items", n},
                   {"common_repeats", list.common_repeats},
                   {"rare_max_repeats", list.rare_max},
                   {"context_tokens", context.count_tokens(sample.context)},
                   {"question", question_mode()}};
  }

 private:
  int common_;
};

}  // namespace

std::unique_ptr<Task> make_ruler_cwe_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {4096}, 128);
  const int common = static_cast<int>(reader.get_int("common", 10, 1, 50));
  CommonTaskOptions options = read_common_options(reader, 4);
  return std::make_unique<RulerCweTask>(instance, lengths, common, options);
}

}  // namespace kvevict::evals
