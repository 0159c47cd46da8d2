#pragma once
// Scoring functions. Text metrics follow LongBench's definitions (THUDM/LongBench `metrics.py`,
// reimplemented) and return values in [0, 1]; the results store keeps score x 100 (0-100 scale).
#include <string>
#include <string_view>
#include <vector>

namespace kvevict::evals {

// LongBench answer normalisation: lower case, punctuation removed, the articles a/an/the removed,
// whitespace collapsed to single spaces.
std::string normalize_answer(std::string_view text);
// Whitespace tokens of a string.
std::vector<std::string> split_words(std::string_view text);

// Token-level F1 of normalised prediction vs reference (bag-of-words overlap).
double qa_f1(std::string_view prediction, std::string_view reference);
// ROUGE-L F1: longest common subsequence of lower-cased word tokens (punctuation stripped).
double rouge_l(std::string_view prediction, std::string_view reference);
// LongBench classification: the classes named in the prediction (dropping those that are proper
// substrings of the reference); 1/k when the reference is among the k named, else 0.
double classification_accuracy(std::string_view prediction, std::string_view reference,
                               const std::vector<std::string>& all_classes);
// LongBench passage retrieval: the reference holds "Paragraph N"; score = share of the numbers in
// the prediction that equal N (0 when the prediction has no number).
double retrieval_score(std::string_view prediction, std::string_view reference);
// LongBench passage count: share of the numbers in the prediction that equal the reference.
double count_score(std::string_view prediction, std::string_view reference);
// LongBench code similarity: the first prediction line that is not a comment or fence, compared by
// Levenshtein (indel) ratio 1 - indel_distance / (|a| + |b|), rounded to whole percent like fuzz.ratio.
double code_edit_similarity(std::string_view prediction, std::string_view reference);
// Edit distance where substitutions cost 2 (insertions and deletions 1): |a| + |b| - 2 LCS(a, b).
int indel_distance(std::string_view a, std::string_view b);

double exact_match(std::string_view prediction, std::string_view reference);  // normalised equality
double contains_match(std::string_view prediction, std::string_view reference);  // case-insensitive substring
// Share of references contained in the prediction (multi-needle).
double contains_all(std::string_view prediction, const std::vector<std::string>& references);

// Distribution metrics over logits rows (natural log; KL in nats).
// KL(p || q) with p = softmax(reference_logits), q = softmax(test_logits).
double kl_divergence(const float* reference_logits, const float* test_logits, int vocab);
bool top1_agrees(const float* reference_logits, const float* test_logits, int vocab);
// Share of positions where two token sequences agree, over the longer length (missing = disagree).
double sequence_agreement(const std::vector<int>& reference, const std::vector<int>& test);

// Dispatch by metric name: qa_f1, rouge_l, classification, retrieval, count, code_sim, exact,
// contains, contains_all. Takes the best over references (contains_all uses them all).
// Throws std::invalid_argument for an unknown name.
double score_prediction(const std::string& metric, std::string_view prediction,
                        const std::vector<std::string>& references, const std::vector<std::string>& all_classes = {});
bool is_known_metric(const std::string& metric);

}  // namespace kvevict::evals
