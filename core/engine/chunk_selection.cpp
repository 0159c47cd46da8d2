#include "core/engine/chunk_selection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>

#include "core/engine/budget_allocator.h"
#include "core/engine/policy_program.h"
#include "core/engine/selection.h"

namespace kvevict {
namespace {

// The head's entries split into protected ones and candidates grouped by chunk (ascending chunk).
struct Split {
  std::vector<int> kept;  // all entries (budget >= T), or the protected ones by position
  bool done = false;      // kept is the answer
  int free = 0;
  std::vector<int> chunk_id;                // ascending
  std::vector<std::vector<int>> members;    // candidates of each chunk, ascending position
};

void order_by_position(std::vector<int>& kept, std::span<const int32_t> positions) {
  std::sort(kept.begin(), kept.end(), [&](int a, int b) { return positions[a] < positions[b]; });
}

Split split(std::span<const float> scores, std::span<const int32_t> positions, const ChunkSelectionSpec& spec) {
  const int T = static_cast<int>(positions.size());
  if (static_cast<int>(scores.size()) != T) throw std::invalid_argument("chunk selection: scores/positions size mismatch");
  if (spec.chunk <= 0) throw std::invalid_argument("chunk selection: the chunk length must be > 0");
  Split s;
  const int budget = std::max(0, spec.budget);
  if (budget >= T) {
    s.kept.resize(T);
    std::iota(s.kept.begin(), s.kept.end(), 0);
    order_by_position(s.kept, positions);
    s.done = true;
    return s;
  }
  s.kept = protected_indices(positions, spec.protect_first, spec.protect_recent);
  if (static_cast<int>(s.kept.size()) >= budget) {
    s.kept.resize(budget);
    order_by_position(s.kept, positions);
    s.done = true;
    return s;
  }
  order_by_position(s.kept, positions);
  s.free = budget - static_cast<int>(s.kept.size());
  std::vector<char> is_prot(T, 0);
  for (int i : s.kept) is_prot[i] = 1;
  std::map<int64_t, std::vector<int>> by_chunk;
  for (int i = 0; i < T; ++i)
    if (!is_prot[i]) by_chunk[static_cast<int64_t>(positions[i]) / spec.chunk].push_back(i);  // positions >= 0
  for (auto& [c, m] : by_chunk) {
    order_by_position(m, positions);
    s.chunk_id.push_back(static_cast<int>(c));
    s.members.push_back(std::move(m));
  }
  return s;
}

// The chosen candidates (already in rank order when score_order) followed by the protected entries
// (by position); all by position unless score_order.
std::vector<int> finish(std::vector<int> chosen, const std::vector<int>& protected_entries,
                        std::span<const int32_t> positions, bool score_order) {
  chosen.insert(chosen.end(), protected_entries.begin(), protected_entries.end());
  if (!score_order) order_by_position(chosen, positions);
  return chosen;
}

double chunk_score(std::span<const float> scores, const std::vector<int>& members, ChunkScore how) {
  double acc = how == ChunkScore::Max ? -INFINITY : 0.0;
  for (int i : members) {
    const double v = std::isnan(scores[i]) ? -INFINITY : scores[i];
    acc = how == ChunkScore::Max ? std::max(acc, v) : acc + v;
  }
  return how == ChunkScore::Mean ? acc / static_cast<double>(members.size()) : acc;
}

}  // namespace

std::vector<int> select_whole_chunks(std::span<const float> scores, std::span<const int32_t> positions,
                                     const ChunkSelectionSpec& spec) {
  Split s = split(scores, positions, spec);
  if (s.done) return s.kept;
  const size_t n = s.members.size();
  std::vector<double> score(n);
  for (size_t c = 0; c < n; ++c) score[c] = chunk_score(scores, s.members[c], spec.chunk_score);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // Ties (and a NaN, from -inf + inf in a sum) rank by chunk index: smaller first.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool na = std::isnan(score[a]), nb = std::isnan(score[b]);
    if (na != nb) return nb;
    if (!na && score[a] != score[b]) return score[a] > score[b];
    return a < b;
  });
  int left = s.free;
  std::vector<int> kept;
  for (size_t c : order) {
    const int cost = static_cast<int>(s.members[c].size());
    if (cost > left) break;  // the longest fitting prefix of the ranking
    left -= cost;
    kept.insert(kept.end(), s.members[c].begin(), s.members[c].end());
  }
  return finish(kept, s.kept, positions, spec.score_order);
}

std::vector<int> select_per_chunk(std::span<const float> scores, std::span<const int32_t> positions,
                                  const ChunkSelectionSpec& spec) {
  Split s = split(scores, positions, spec);
  if (s.done) return s.kept;
  std::vector<double> weight;
  std::vector<int64_t> cap;
  for (const auto& m : s.members) {
    weight.push_back(static_cast<double>(m.size()));
    cap.push_back(static_cast<int64_t>(m.size()));
  }
  const std::vector<int64_t> quota = allocate_budgets(weight, cap, s.free);
  std::vector<int> kept;
  for (size_t c = 0; c < s.members.size(); ++c) {
    const auto top = top_k_indices(scores, positions, s.members[c], static_cast<int>(quota[c]));
    kept.insert(kept.end(), top.begin(), top.end());
  }
  if (spec.score_order) kept = top_k_indices(scores, positions, kept, static_cast<int>(kept.size()));  // by rank
  return finish(kept, s.kept, positions, spec.score_order);
}

}  // namespace kvevict

namespace kvevict {

bool chunked_selection(const PolicySelect& select) {
  return select.unit == SelectUnit::Chunk || select.quota == SelectQuota::PerChunk;
}

std::vector<int> select_chunked(std::span<const float> scores, std::span<const int32_t> positions,
                                const PolicySelect& select, int budget, int protect_first, int protect_recent) {
  const ChunkSelectionSpec spec{budget, protect_first, protect_recent, select.chunk, select.chunk_score,
                                select.kept_order == KeptOrder::Score};
  return select.unit == SelectUnit::Chunk ? select_whole_chunks(scores, positions, spec)
                                          : select_per_chunk(scores, positions, spec);
}

}  // namespace kvevict
