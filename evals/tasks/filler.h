#pragma once
// Filler ("haystack") text built to a target length in tokens of the model's tokenizer, and
// insertion of needles at a depth. Text is made of whole sentences; lengths are measured with the
// real tokenizer (the sum of sentence counts is only a first estimate, then the assembled text is
// measured and trimmed), so a context lands at or just below its target.
#include <string>
#include <vector>

#include "evals/tasks/task.h"
#include "evals/util/rng.h"

namespace kvevict::evals {

enum class FillerStyle {
  Repetitive,  // "The grass is green. The sky is blue. ..." (the classic passkey filler)
  Essay,       // varied generated sentences (needle, fidelity)
};

struct Haystack {
  std::vector<std::string> sentences;  // each starts with a space except the first
  std::vector<int> tokens;             // token count of each sentence, measured alone
};

// Sentences until their measured total reaches `target_tokens` (never above it, unless one sentence
// alone is longer).
Haystack build_haystack(FillerStyle style, Rng& rng, const TokenCounter& count, int target_tokens);

struct PlacedText {
  std::string text;
  std::vector<int> needle_token_offsets;  // token offset of each needle's start in `text`
  std::vector<int> needle_sentence_index; // sentence boundary chosen for each needle
  int total_tokens = 0;                   // measured on the whole text
};

// Inserts needle i at the sentence boundary whose cumulative token count is closest to
// depths[i] percent of the haystack (0: before the first sentence, 100: after the last).
// Needles at the same boundary keep their order. Offsets are measured with `count`.
PlacedText place_needles(const Haystack& haystack, const std::vector<std::string>& needles,
                         const std::vector<double>& depths, const TokenCounter& count);

// Shrinks the haystack (dropping sentences from the end) until the placed text, measured whole,
// is at most `target_tokens`; returns the placed text.
PlacedText fit_to_length(Haystack haystack, const std::vector<std::string>& needles,
                         const std::vector<double>& depths, const TokenCounter& count, int target_tokens);

}  // namespace kvevict::evals
