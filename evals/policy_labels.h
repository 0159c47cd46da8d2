#pragma once
// Leaderboard names of policies keyed by content (name, policy hash): a name stands alone while
// every finished row of it has one content; where one name has several contents (two different
// files called snapkv.yaml, or a file edited between runs) each gets "name@" plus the shortest
// prefix of its hash, at least 6 hex digits, that tells them apart ("snapkv@3f2a91"), and rows
// written before schema version 4 (no hash) "name@nohash".
#include <map>
#include <set>
#include <string>
#include <utility>

namespace kvevict::evals {

using PolicyContents = std::map<std::string, std::set<std::string>>;  // name -> its policy hashes

// (name, hash) -> label, for every pair in `contents`.
std::map<std::pair<std::string, std::string>, std::string> policy_display_labels(const PolicyContents& contents);

}  // namespace kvevict::evals
