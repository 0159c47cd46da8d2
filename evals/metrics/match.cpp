// Exact and substring matches, and the dispatch by metric name.
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "evals/metrics/metrics.h"

namespace kvevict::evals {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = {"qa_f1",   "rouge_l", "classification", "retrieval",   "count",
                                                 "code_sim", "exact",   "contains",       "contains_all"};
  return names;
}

}  // namespace

double exact_match(std::string_view prediction, std::string_view reference) {
  return normalize_answer(prediction) == normalize_answer(reference) ? 1.0 : 0.0;
}

double contains_match(std::string_view prediction, std::string_view reference) {
  if (reference.empty()) return 0.0;
  return lower(prediction).find(lower(reference)) != std::string::npos ? 1.0 : 0.0;
}

double contains_all(std::string_view prediction, const std::vector<std::string>& references) {
  if (references.empty()) return 0.0;
  double found = 0;
  for (const auto& reference : references) found += contains_match(prediction, reference);
  return found / references.size();
}

bool is_known_metric(const std::string& metric) {
  const auto& names = metric_names();
  return std::find(names.begin(), names.end(), metric) != names.end();
}

double score_prediction(const std::string& metric, std::string_view prediction,
                        const std::vector<std::string>& references, const std::vector<std::string>& all_classes) {
  if (metric == "contains_all") return contains_all(prediction, references);
  double best = 0.0;
  for (const auto& reference : references) {
    double score;
    if (metric == "qa_f1") score = qa_f1(prediction, reference);
    else if (metric == "rouge_l") score = rouge_l(prediction, reference);
    else if (metric == "classification") score = classification_accuracy(prediction, reference, all_classes);
    else if (metric == "retrieval") score = retrieval_score(prediction, reference);
    else if (metric == "count") score = count_score(prediction, reference);
    else if (metric == "code_sim") score = code_edit_similarity(prediction, reference);
    else if (metric == "exact") score = exact_match(prediction, reference);
    else if (metric == "contains") score = contains_match(prediction, reference);
    else throw std::invalid_argument("unknown metric '" + metric + "'");
    best = std::max(best, score);
  }
  return best;
}

}  // namespace kvevict::evals
