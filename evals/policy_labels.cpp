#include "evals/policy_labels.h"

#include <algorithm>

namespace kvevict::evals {
namespace {

constexpr size_t kMinPrefix = 6;

// The shortest prefix length >= kMinPrefix at which the hashes differ pairwise (the whole hash when
// two share every digit, which distinct SHA-256 hex strings never do).
size_t distinguishing_length(const std::set<std::string>& hashes) {
  size_t longest = 0;
  for (const auto& hash : hashes) longest = std::max(longest, hash.size());
  for (size_t length = kMinPrefix; length < longest; ++length) {
    std::set<std::string> prefixes;
    for (const auto& hash : hashes) {
      if (!hash.empty()) prefixes.insert(hash.substr(0, length));
    }
    if (prefixes.size() == hashes.size() - hashes.count("")) return length;
  }
  return longest;
}

}  // namespace

std::map<std::pair<std::string, std::string>, std::string> policy_display_labels(const PolicyContents& contents) {
  std::map<std::pair<std::string, std::string>, std::string> labels;
  for (const auto& [name, hashes] : contents) {
    if (hashes.size() < 2) {
      for (const auto& hash : hashes) labels[{name, hash}] = name;
      continue;
    }
    const size_t length = distinguishing_length(hashes);
    for (const auto& hash : hashes) labels[{name, hash}] = name + "@" + (hash.empty() ? "nohash" : hash.substr(0, length));
  }
  return labels;
}

}  // namespace kvevict::evals
