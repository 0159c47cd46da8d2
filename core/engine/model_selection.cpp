#include "core/engine/model_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "core/engine/selection.h"

namespace kvevict {
namespace {

struct Candidate {
  float score;
  int32_t position;
  int layer, head, index;
};

// Strict "a ranks before b": the tie rule (selection.h), then layer asc, head asc.
bool candidate_order(const Candidate& a, const Candidate& b) {
  if (ranks_before(a.score, a.position, b.score, b.position)) return true;
  if (ranks_before(b.score, b.position, a.score, a.position)) return false;
  if (a.layer != b.layer) return a.layer < b.layer;
  return a.head < b.head;
}

}  // namespace

std::vector<std::vector<std::vector<int>>> select_model_wide(
    const std::vector<std::vector<std::span<const float>>>& scores,
    const std::vector<std::vector<std::span<const int32_t>>>& positions, const std::vector<int>& layer_budget,
    int protect_first, int protect_recent, bool score_order) {
  const int L = static_cast<int>(scores.size());
  if (static_cast<int>(positions.size()) != L || static_cast<int>(layer_budget.size()) != L)
    throw std::invalid_argument("select_model_wide: scores, positions and budgets disagree on the layers");
  std::vector<std::vector<std::vector<int>>> kept(L), prot(L);
  std::vector<Candidate> all;
  int64_t pool = 0;
  for (int l = 0; l < L; ++l) {
    const int H = static_cast<int>(scores[l].size());
    if (static_cast<int>(positions[l].size()) != H) throw std::invalid_argument("select_model_wide: heads disagree");
    kept[l].resize(H);
    prot[l].resize(H);
    for (int h = 0; h < H; ++h) {
      const auto& pos = positions[l][h];
      const int T = static_cast<int>(pos.size());
      if (static_cast<int>(scores[l][h].size()) != T) throw std::invalid_argument("select_model_wide: scores/positions size mismatch");
      prot[l][h] = protected_indices(pos, protect_first, protect_recent);
      const int budget = std::max(0, layer_budget[l]);
      if (static_cast<int>(prot[l][h].size()) > budget) prot[l][h].resize(budget);  // sinks first, then newest
      std::vector<char> is_prot(T, 0);
      for (int i : protected_indices(pos, protect_first, protect_recent)) is_prot[i] = 1;
      int candidates = 0;
      for (int i = 0; i < T; ++i)
        if (!is_prot[i]) {
          all.push_back({scores[l][h][i], pos[i], l, h, i});
          ++candidates;
        }
      pool += std::clamp(budget - static_cast<int>(prot[l][h].size()), 0, candidates);
    }
  }
  const int64_t k = std::min<int64_t>(pool, static_cast<int64_t>(all.size()));
  std::partial_sort(all.begin(), all.begin() + k, all.end(), candidate_order);
  for (int64_t j = 0; j < k; ++j) kept[all[j].layer][all[j].head].push_back(all[j].index);
  for (int l = 0; l < L; ++l)
    for (size_t h = 0; h < kept[l].size(); ++h) {
      const auto& pos = positions[l][h];
      auto by_position = [&](int a, int b) { return pos[a] < pos[b]; };
      std::sort(prot[l][h].begin(), prot[l][h].end(), by_position);
      kept[l][h].insert(kept[l][h].end(), prot[l][h].begin(), prot[l][h].end());
      if (!score_order) std::sort(kept[l][h].begin(), kept[l][h].end(), by_position);
    }
  return kept;
}

}  // namespace kvevict
