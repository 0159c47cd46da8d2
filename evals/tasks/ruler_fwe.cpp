// ruler_fwe: RULER's frequent words extraction (Hsieh et al. 2024, reimplemented). A long sequence
// of vocabulary words, each drawn independently from a Zipf law: the word of rank k (ranks given to
// the words in a seeded order) has probability proportional to k^-alpha. The question asks for the
// 3 most frequent words of the sequence (score: share found). The sequence length sets the context
// length. The answer is the sequence's own top 3, never a tie: where a word outside the top 3 is as
// frequent as the third, its last occurrence becomes the third word (repeated until none is).
// Options: lengths, alpha (in (1, 5], default 2), samples, question.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/util/error.h"
#include "evals/tasks/grid_task.h"
#include "evals/tasks/ruler_words.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

constexpr int kTop = 3;

class RulerFweTask : public LengthDepthGridTask {
 public:
  RulerFweTask(std::string name, std::vector<int64_t> lengths, double alpha, CommonTaskOptions common)
      : LengthDepthGridTask(std::move(name), std::move(lengths), {}, common), alpha_(alpha) {}

 protected:
  void fill_sample(const TaskContext& context, Rng& rng, Sample& sample) const override {
    const std::vector<std::string> words = ruler::draw_words(rng, ruler::vocabulary().size());
    std::vector<double> cumulative;  // of the Zipf weights by rank
    double total = 0;
    for (size_t k = 0; k < words.size(); ++k) cumulative.push_back(total += std::pow(static_cast<double>(k + 1), -alpha_));
    // Every word takes at least one token, so `length` draws are more than any context can hold;
    // a candidate size keeps a prefix of them.
    std::vector<int> drawn;
    for (int i = 0; i < sample.length; ++i) {
      const double u = rng.unit() * total;
      drawn.push_back(static_cast<int>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin()));
      drawn.back() = std::min<int>(drawn.back(), static_cast<int>(words.size()) - 1);
    }
    const std::string header = "Below is a long sequence of words. Some of them are repeated much more often than "
                               "others.\n";
    auto text_of = [&](const std::vector<int>& ranks) {
      std::string text = header;
      for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : " ") + words[ranks[i]];
      return text;
    };
    auto prefix = [&](int n) { return std::vector<int>(drawn.begin(), drawn.begin() + n); };
    int n = ruler::largest_fitting(kTop + 1, sample.length, sample.length,
                                   [&](int size) { return context.count_tokens(text_of(prefix(size))); });
    std::vector<int> ranks, top;
    std::map<int, int> counts;
    // Breaking a tie swaps words of different lengths; shorten the sequence if that overflows.
    for (; n > kTop; --n) {
      ranks = prefix(n);
      top = break_ties(ranks, counts);
      if (context.count_tokens(text_of(ranks)) <= sample.length) break;
    }
    if (n <= kTop) {
      throw UsageError(name() + " " + sample.key + ": a context of " + std::to_string(sample.length) +
                       " tokens is too short for a sequence with 3 frequent words; use a longer length");
    }
    sample.context = text_of(ranks);
    sample.question = "What are the 3 most frequent words in the sequence above? Answer with the words only.";
    sample.answer_prefix = "The 3 most frequent words in the sequence are:";
    nlohmann::json top_counts = nlohmann::json::array();
    for (int rank : top) {
      sample.references.push_back(words[rank]);
      top_counts.push_back(counts[rank]);
    }
    int fourth = 0;
    for (const auto& [rank, count] : counts) {
      if (std::find(top.begin(), top.end(), rank) == top.end()) fourth = std::max(fourth, count);
    }
    sample.metric = "contains_all";
    sample.max_new_tokens = ruler::answer_token_budget(context.count_tokens, sample.references);
    sample.grid = {{"length", sample.length},   {"alpha", alpha_},
                   {"words", n},                {"distinct_words", counts.size()},
                   {"top_counts", top_counts},  {"fourth_count", fourth},
                   {"context_tokens", context.count_tokens(sample.context)},
                   {"question", question_mode()}};
  }

 private:
  // The 3 most frequent ranks of `ranks` (ties by rank), made strictly more frequent than every
  // other word by turning last occurrences of a tied word into the third. Fills `counts`.
  static std::vector<int> break_ties(std::vector<int>& ranks, std::map<int, int>& counts) {
    counts.clear();
    for (int rank : ranks) ++counts[rank];
    // A steep law over a short sequence may draw fewer than 3 distinct words: the last occurrences
    // of the most frequent one become the first unused ranks.
    for (int unused = 0; static_cast<int>(counts.size()) < kTop; ++unused) {
      if (counts.count(unused)) continue;
      const int most = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                         return a.second < b.second;
                       })->first;
      *std::find(ranks.rbegin(), ranks.rend(), most) = unused;
      --counts[most];
      counts[unused] = 1;
    }
    std::vector<std::pair<int, int>> by_count;  // (-count, rank): most frequent first, then lower rank
    for (const auto& [rank, count] : counts) by_count.push_back({-count, rank});
    std::sort(by_count.begin(), by_count.end());
    std::vector<int> top;
    for (size_t k = 0; k < by_count.size() && static_cast<int>(top.size()) < kTop; ++k) top.push_back(by_count[k].second);
    const int third = top.back();
    for (size_t k = kTop; k < by_count.size(); ++k) {
      const int rank = by_count[k].second;
      for (size_t i = ranks.size(); counts[rank] >= counts[third] && i-- > 0;) {
        if (ranks[i] != rank) continue;
        ranks[i] = third;
        --counts[rank];
        ++counts[third];
      }
    }
    return top;
  }

  double alpha_;
};

}  // namespace

std::unique_ptr<Task> make_ruler_fwe_task(MapReader& reader, const std::string& instance) {
  auto lengths = reader.get_length_list("lengths", {4096}, 128);
  const double alpha = reader.get_double("alpha", 2.0, 1.0, 5.0);
  if (alpha <= 1.0) {
    reader.errors().error(reader.raw("alpha"), reader.path_of("alpha"),
                          "alpha must be above 1 (a Zipf law with alpha <= 1 has no clear frequent words)");
  }
  CommonTaskOptions common = read_common_options(reader, 4);
  return std::make_unique<RulerFweTask>(instance, lengths, alpha, common);
}

}  // namespace kvevict::evals
