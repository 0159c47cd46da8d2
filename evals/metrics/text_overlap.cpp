// Word-overlap metrics: QA F1 and ROUGE-L.
#include <algorithm>
#include <cctype>
#include <map>

#include "evals/metrics/metrics.h"

namespace kvevict::evals {
namespace {

size_t lcs_length(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<size_t> row(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = 0;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = a[i - 1] == b[j - 1] ? diagonal + 1 : std::max(row[j], row[j - 1]);
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> rouge_tokens(std::string_view text) {
  std::string cleaned;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    cleaned += (u < 128 && !std::isalnum(u)) ? ' ' : static_cast<char>(u < 128 ? std::tolower(u) : u);
  }
  return split_words(cleaned);
}

}  // namespace

double qa_f1(std::string_view prediction, std::string_view reference) {
  auto predicted = split_words(normalize_answer(prediction));
  auto expected = split_words(normalize_answer(reference));
  if (predicted.empty() || expected.empty()) return 0.0;
  std::map<std::string, int> counts;
  for (const auto& w : expected) ++counts[w];
  int common = 0;
  for (const auto& w : predicted) {
    auto it = counts.find(w);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  double precision = static_cast<double>(common) / predicted.size();
  double recall = static_cast<double>(common) / expected.size();
  return 2 * precision * recall / (precision + recall);
}

double rouge_l(std::string_view prediction, std::string_view reference) {
  auto predicted = rouge_tokens(prediction);
  auto expected = rouge_tokens(reference);
  if (predicted.empty() || expected.empty()) return 0.0;
  double lcs = static_cast<double>(lcs_length(predicted, expected));
  if (lcs == 0) return 0.0;
  double precision = lcs / predicted.size();
  double recall = lcs / expected.size();
  return 2 * precision * recall / (precision + recall);
}

}  // namespace kvevict::evals
