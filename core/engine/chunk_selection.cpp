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
  std::vector<std::vector<int>> members;  // candidates of each chunk (ascending chunk), ascending position
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

// Chunk indices by score, higher first; ties (and a NaN, from -inf + inf in a sum, ranked last)
// by chunk index, smaller first.
std::vector<size_t> chunk_ranking(const std::vector<double>& score) {
  std::vector<size_t> order(score.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool na = std::isnan(score[a]), nb = std::isnan(score[b]);
    if (na != nb) return nb;
    if (!na && score[a] != score[b]) return score[a] > score[b];
    return a < b;
  });
  return order;
}

}  // namespace

std::vector<int> select_whole_chunks(std::span<const float> scores, std::span<const int32_t> positions,
                                     const ChunkSelectionSpec& spec) {
  Split s = split(scores, positions, spec);
  if (s.done) return s.kept;
  const size_t n = s.members.size();
  std::vector<double> score(n);
  for (size_t c = 0; c < n; ++c) score[c] = chunk_score(scores, s.members[c], spec.chunk_score);
  const std::vector<size_t> order = chunk_ranking(score);
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

namespace {

// The normalised entropy H_c of a chunk's candidates' scores (chunk_selection.h).
double normalised_entropy(std::span<const float> scores, const std::vector<int>& members) {
  const size_t n = members.size();
  if (n < 2) return 0.0;
  std::vector<double> x(n);
  double lo = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const float v = scores[members[i]];
    x[i] = std::isfinite(v) ? v : 0.0;
    lo = std::min(lo, x[i]);
  }
  double sum = 0.0;
  for (double& v : x) sum += (v -= lo);
  double h = 0.0;
  for (double v : x) {
    const double p = v / (sum + 1e-8);
    h -= p * std::log(p + 1e-8);
  }
  return std::clamp(h / std::log(static_cast<double>(n)), 0.0, 1.0);
}

// Entropies closer than this to the median count as equal to it: chunks holding the same values in
// another order have the same entropy, and the last bits of its sum depend on order and rounding.
constexpr double kEntropyTie = 1e-9;

// torch.median: the lower of the two middle values.
double lower_median(std::vector<double> v) {
  const size_t m = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end(), [](double a, double b) {
    if (std::isnan(a) != std::isnan(b)) return std::isnan(b);  // NaN sorts last
    return a < b;
  });
  return v[m];
}

}  // namespace

std::vector<int> select_entropy_gated(std::span<const float> scores, std::span<const int32_t> positions,
                                      const ChunkSelectionSpec& spec) {
  if (spec.rescue < 1) throw std::invalid_argument("chunk selection: the entropy gate needs rescue >= 1");
  Split s = split(scores, positions, spec);
  if (s.done) return s.kept;
  const size_t n = s.members.size();
  std::vector<double> score(n), entropy(n);
  for (size_t c = 0; c < n; ++c) {
    score[c] = chunk_score(scores, s.members[c], spec.chunk_score);
    entropy[c] = normalised_entropy(scores, s.members[c]);
  }
  const double score_median = lower_median(score), entropy_median = lower_median(entropy);
  const std::vector<size_t> order = chunk_ranking(score);
  std::vector<char> taken(positions.size(), 0);
  std::vector<int> kept;
  int left = s.free;
  for (size_t c : order) {
    if (left <= 0) break;
    int k = std::min(static_cast<int>(s.members[c].size()), left);
    if (score[c] >= score_median && entropy[c] < entropy_median - kEntropyTie) k = std::min(k, spec.rescue);
    for (int i : top_k_indices(scores, positions, s.members[c], k)) {
      kept.push_back(i);
      taken[i] = 1;
    }
    left -= k;
  }
  if (left > 0) {  // the spiky chunks' savings: the best remaining candidates
    std::vector<int> rest;
    for (const auto& m : s.members)
      for (int i : m)
        if (!taken[i]) rest.push_back(i);
    const auto more = top_k_indices(scores, positions, rest, left);
    kept.insert(kept.end(), more.begin(), more.end());
  }
  if (spec.score_order) kept = top_k_indices(scores, positions, kept, static_cast<int>(kept.size()));
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
  const ChunkSelectionSpec spec{budget,       protect_first,      protect_recent,
                                select.chunk, select.chunk_score, select.kept_order == KeptOrder::Score,
                                select.rescue};
  if (select.unit != SelectUnit::Chunk) return select_per_chunk(scores, positions, spec);
  return select.gate == ChunkGate::Entropy ? select_entropy_gated(scores, positions, spec)
                                           : select_whole_chunks(scores, positions, spec);
}

}  // namespace kvevict
