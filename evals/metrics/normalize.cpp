#include <cctype>

#include "evals/metrics/metrics.h"

namespace kvevict::evals {

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string current;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!current.empty()) words.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) words.push_back(std::move(current));
  return words;
}

std::string normalize_answer(std::string_view text) {
  std::string lowered;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 128 && std::ispunct(u)) continue;  // ASCII punctuation, as Python's string.punctuation
    lowered += static_cast<char>(u < 128 ? std::tolower(u) : u);
  }
  std::string out;
  for (const auto& word : split_words(lowered)) {
    if (word == "a" || word == "an" || word == "the") continue;
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

}  // namespace kvevict::evals
