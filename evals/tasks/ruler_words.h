#pragma once
// Material and length fitting shared by the RULER-style tasks (ruler_niah, ruler_vt, ruler_cwe,
// ruler_fwe; Hsieh et al. 2024, reimplemented): a vocabulary of ordinary English words written for
// this project, seeded value generators, and the fitting that lands a context within one word of its
// target length in the model's tokens, never above it.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "evals/tasks/filler.h"
#include "evals/tasks/task.h"
#include "evals/util/rng.h"

namespace kvevict::evals::ruler {

// Lower-case words of at least four letters. None contains another, and none occurs inside the
// filler's sentences or the RULER tasks' fixed wording, so a word occurs in a context exactly as
// often as a task put it there (tests/evals/ruler_tasks_test.cpp checks all three).
const std::vector<std::string>& vocabulary();

// `n` distinct vocabulary words in a seeded order (n <= vocabulary().size()).
std::vector<std::string> draw_words(Rng& rng, size_t n);
// A 7-digit number (1000000..9999999) and a version-4 style UUID (8-4-4-4-12 lower-case hex).
std::string seven_digit_number(Rng& rng);
std::string uuid(Rng& rng);

std::string lower(std::string_view text);
// Non-overlapping occurrences of `needle` in `text`, case-insensitive.
int count_occurrences(std::string_view text, std::string_view needle);
// "a, b and c"
std::string join_and(const std::vector<std::string>& items);

// Tokens a greedy answer listing `references` may need: the list measured, plus room for
// separators, numbering and a short lead-in (SmolLM2 spells each digit as one token, so a UUID is
// about 25 tokens).
int answer_token_budget(const TokenCounter& count, const std::vector<std::string>& references);

// The largest n in [lo, hi] with tokens(n) <= target, by bisection; tokens(n) must grow with n
// (near enough: the result always fits). Returns lo - 1 when even tokens(lo) exceeds the target.
int largest_fitting(int lo, int hi, int target, const std::function<int(int)>& tokens);

struct FittedContext {
  std::string text;                  // header + filler with the needles
  int tokens = 0;                    // measured on the whole text
  std::vector<int> needle_offsets;   // token offset of each needle's start in `text`
};

// `header` followed by filler of `style` with needle i at the sentence boundary closest to
// depths[i] percent (filler.h place_needles), sized so the whole text is at most `target` tokens
// and within one filler word of it: whole sentences first, then the first words of further
// sentences (RULER also cuts its haystack at a word). Throws UsageError naming `where` when the
// header and needles alone do not fit.
FittedContext fit_needles_in_filler(FillerStyle style, Rng& rng, const TokenCounter& count, const std::string& header,
                                    const std::vector<std::string>& needles, const std::vector<double>& depths,
                                    int target, const std::string& where);

}  // namespace kvevict::evals::ruler
