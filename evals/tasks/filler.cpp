#include "evals/tasks/filler.h"

#include <algorithm>
#include <cmath>

namespace kvevict::evals {
namespace {

const char* const kRepetitive[] = {"The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
                                   "There and back again."};

const char* const kSubjects[] = {
    "The old lighthouse keeper", "A travelling merchant", "The village council", "My grandmother",
    "The river pilot",           "A young engineer",      "The museum curator",  "The night watchman",
    "An apprentice baker",       "The harbour master",    "A retired teacher",   "The orchard owner",
    "The stationmaster",         "A quiet librarian",     "The ferry captain",   "The mountain guide"};
const char* const kVerbs[] = {"carefully repaired", "often talked about", "slowly painted", "once measured",
                              "proudly showed",     "quietly sorted",     "never forgot",   "patiently explained",
                              "rarely visited",     "gladly shared",      "kept a record of", "walked past"};
const char* const kObjects[] = {"the wooden bridge",  "a box of letters",     "the northern road",
                                "the copper kettle",  "an unfinished map",    "the stone well",
                                "a basket of apples", "the clock tower",      "the winter garden",
                                "a pile of old books", "the fishing nets",    "the narrow staircase"};
const char* const kEndings[] = {"before the first snow", "after the market closed", "during the long summer",
                                "while the bells rang",  "at the end of the week",  "on a windy afternoon",
                                "without any help",      "for the whole village",   "as the tide came in",
                                "early in the morning"};

template <size_t N>
const char* pick(Rng& rng, const char* const (&list)[N]) {
  return list[rng.below(N)];
}

std::string make_sentence(FillerStyle style, Rng& rng, size_t index) {
  if (style == FillerStyle::Repetitive) return kRepetitive[index % 5];
  return std::string(pick(rng, kSubjects)) + " " + pick(rng, kVerbs) + " " + pick(rng, kObjects) + " " +
         pick(rng, kEndings) + ".";
}

}  // namespace

Haystack build_haystack(FillerStyle style, Rng& rng, const TokenCounter& count, int target_tokens) {
  Haystack haystack;
  int total = 0;
  for (size_t i = 0; total < target_tokens; ++i) {
    std::string sentence = make_sentence(style, rng, i);
    if (i > 0) sentence = " " + sentence;
    int tokens = count(sentence);
    if (total + tokens > target_tokens && !haystack.sentences.empty()) break;
    haystack.sentences.push_back(std::move(sentence));
    haystack.tokens.push_back(tokens);
    total += tokens;
  }
  return haystack;
}

PlacedText place_needles(const Haystack& haystack, const std::vector<std::string>& needles,
                         const std::vector<double>& depths, const TokenCounter& count) {
  const size_t n = haystack.sentences.size();
  std::vector<int> cumulative(n + 1, 0);  // tokens before boundary b
  for (size_t i = 0; i < n; ++i) cumulative[i + 1] = cumulative[i] + haystack.tokens[i];

  PlacedText placed;
  std::vector<std::vector<size_t>> at_boundary(n + 1);
  for (size_t k = 0; k < needles.size(); ++k) {
    double target = std::clamp(depths[k], 0.0, 100.0) / 100.0 * cumulative[n];
    size_t best = 0;
    for (size_t b = 1; b <= n; ++b) {
      if (std::abs(cumulative[b] - target) < std::abs(cumulative[best] - target)) best = b;
    }
    at_boundary[best].push_back(k);
    placed.needle_sentence_index.push_back(static_cast<int>(best));
  }
  placed.needle_token_offsets.assign(needles.size(), 0);
  for (size_t b = 0; b <= n; ++b) {
    for (size_t k : at_boundary[b]) {
      placed.needle_token_offsets[k] = placed.text.empty() ? 0 : count(placed.text);
      placed.text += (placed.text.empty() ? "" : " ") + needles[k];
    }
    if (b < n) {
      const std::string& sentence = haystack.sentences[b];
      // The first sentence has no leading space; give it one when a needle precedes it.
      if (b == 0 && !placed.text.empty()) placed.text += " ";
      placed.text += sentence;
    }
  }
  placed.total_tokens = count(placed.text);
  return placed;
}

PlacedText fit_to_length(Haystack haystack, const std::vector<std::string>& needles,
                         const std::vector<double>& depths, const TokenCounter& count, int target_tokens) {
  PlacedText placed = place_needles(haystack, needles, depths, count);
  while (placed.total_tokens > target_tokens && haystack.sentences.size() > 1) {
    int excess = placed.total_tokens - target_tokens;
    while (excess > 0 && haystack.sentences.size() > 1) {
      excess -= haystack.tokens.back();
      haystack.sentences.pop_back();
      haystack.tokens.pop_back();
    }
    placed = place_needles(haystack, needles, depths, count);
  }
  return placed;
}

}  // namespace kvevict::evals
