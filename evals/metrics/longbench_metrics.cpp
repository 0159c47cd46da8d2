// LongBench's task-specific metrics: classification, retrieval, count, code similarity.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "evals/metrics/metrics.h"

namespace kvevict::evals {
namespace {

std::vector<std::string> numbers_in(std::string_view text) {
  std::vector<std::string> numbers;
  std::string current;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      current += c;
    } else if (!current.empty()) {
      numbers.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) numbers.push_back(current);
  return numbers;
}

double share_equal(const std::vector<std::string>& numbers, const std::string& expected) {
  if (numbers.empty()) return 0.0;
  size_t right = std::count(numbers.begin(), numbers.end(), expected);
  return static_cast<double>(right) / numbers.size();
}

}  // namespace

double classification_accuracy(std::string_view prediction, std::string_view reference,
                               const std::vector<std::string>& all_classes) {
  std::vector<std::string> named;
  for (const auto& label : all_classes) {
    if (!label.empty() && prediction.find(label) != std::string_view::npos) named.push_back(label);
  }
  std::vector<std::string> kept;
  for (const auto& label : named) {
    bool inside_reference = reference.find(label) != std::string_view::npos && label != reference;
    if (!inside_reference) kept.push_back(label);
  }
  if (std::find(kept.begin(), kept.end(), std::string(reference)) == kept.end()) return 0.0;
  return 1.0 / kept.size();
}

double retrieval_score(std::string_view prediction, std::string_view reference) {
  const std::string marker = "Paragraph ";
  size_t at = reference.find(marker);
  if (at == std::string_view::npos) return 0.0;
  std::string expected;
  for (size_t i = at + marker.size(); i < reference.size() && std::isdigit(static_cast<unsigned char>(reference[i])); ++i) {
    expected += reference[i];
  }
  if (expected.empty()) return 0.0;
  return share_equal(numbers_in(prediction), expected);
}

double count_score(std::string_view prediction, std::string_view reference) {
  return share_equal(numbers_in(prediction), std::string(reference));
}

int indel_distance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = 0;
    for (size_t j = 1; j <= b.size(); ++j) {
      int above = row[j];
      row[j] = a[i - 1] == b[j - 1] ? diagonal + 1 : std::max(row[j], row[j - 1]);
      diagonal = above;
    }
  }
  return static_cast<int>(a.size() + b.size()) - 2 * row[b.size()];
}

double code_edit_similarity(std::string_view prediction, std::string_view reference) {
  size_t start = prediction.find_first_not_of('\n');
  prediction = start == std::string_view::npos ? std::string_view() : prediction.substr(start);
  std::string_view chosen;
  while (!prediction.empty()) {
    size_t end = prediction.find('\n');
    std::string_view line = prediction.substr(0, end);
    if (line.find('`') == std::string_view::npos && line.find('#') == std::string_view::npos &&
        line.find("//") == std::string_view::npos) {
      chosen = line;
      break;
    }
    if (end == std::string_view::npos) break;
    prediction.remove_prefix(end + 1);
  }
  size_t total = chosen.size() + reference.size();
  if (total == 0) return 1.0;
  double ratio = 1.0 - static_cast<double>(indel_distance(chosen, reference)) / total;
  return std::round(ratio * 100.0) / 100.0;
}

}  // namespace kvevict::evals
