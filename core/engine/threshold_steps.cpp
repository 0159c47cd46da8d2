#include "core/engine/threshold_steps.h"

#include <algorithm>
#include <stdexcept>

#include "core/engine/selection.h"

namespace kvevict {
namespace {

// The prefix of entries whose positions are below protect_first, counted on from `from` (the
// positions increase, so the sinks are a prefix).
int count_sinks(std::span<const int32_t> positions, int from, int protect_first) {
  int s = from;
  while (s < static_cast<int>(positions.size()) && positions[s] < protect_first) ++s;
  return s;
}

// The end of the unprotected range [sinks, end): the last protect_recent entries are protected.
int unprotected_end(int length, int sinks, int protect_recent) {
  return std::max(sinks, length - std::max(0, protect_recent));
}

bool passes(float score, double threshold) { return static_cast<double>(score) >= threshold; }  // false for NaN

// The heap order: a before b when a ranks before b under the tie rule (selection.h), which puts
// the entry ranked last at the front.
bool pool_order(const PoolEntry& a, const PoolEntry& b) { return ranks_before(a.score, a.position, b.score, b.position); }

}  // namespace

std::optional<ThresholdWindowRecord> verify_threshold_head(std::span<const float> scores,
                                                           std::span<const int32_t> positions, uint64_t stamp,
                                                           int protect_first, int protect_recent, double threshold) {
  if (scores.size() != positions.size())
    throw std::invalid_argument("verify_threshold_head: scores/positions size mismatch");
  const int T = static_cast<int>(positions.size());
  for (int i = 1; i < T; ++i)
    if (positions[i] <= positions[i - 1]) return std::nullopt;
  const int sinks = count_sinks(positions, 0, protect_first);
  const int end = unprotected_end(T, sinks, protect_recent);
  for (int i = sinks; i < end; ++i)
    if (!passes(scores[i], threshold)) return std::nullopt;
  return ThresholdWindowRecord{.stamp = stamp,
                               .length = T,
                               .sinks = sinks,
                               .protect_first = protect_first,
                               .protect_recent = protect_recent,
                               .pool = {},
                               .pool_held = false};
}

std::optional<std::vector<int>> threshold_window_step(std::span<const float> scores,
                                                      std::span<const int32_t> positions, uint64_t stamp,
                                                      ThresholdWindowRecord& record, int protect_first,
                                                      int protect_recent, double threshold, int cap) {
  if (scores.size() != positions.size())
    throw std::invalid_argument("threshold_window_step: scores/positions size mismatch");
  const int T = static_cast<int>(positions.size());
  const int T0 = record.length;
  auto decline = [&record]() -> std::optional<std::vector<int>> {
    record = ThresholdWindowRecord{};
    return std::nullopt;
  };
  if (record.stamp == 0 || record.stamp != stamp || record.protect_first != protect_first ||
      record.protect_recent != protect_recent || T < T0)
    return decline();
  for (int i = std::max(T0, 1); i < T; ++i)
    if (positions[i] <= positions[i - 1]) return decline();
  // The sinks grow only while every entry was one (an entry at or past protect_first ends them).
  const int sinks = record.sinks < T0 ? record.sinks : count_sinks(positions, T0, protect_first);
  const int end = unprotected_end(T, sinks, protect_recent);
  const int protected_count = T - (end - sinks);
  if (protected_count > std::max(0, cap)) return decline();
  // Unprotected now: [sinks, end). Those unprotected at the record, [record.sinks, end0), passed
  // then and still do (frozen scores); the rest left the recent window since.
  const int end0 = unprotected_end(T0, record.sinks, protect_recent);
  std::vector<int> evicted;
  std::vector<PoolEntry> joined;
  for (int i = std::max(sinks, end0); i < end; ++i) {
    if (passes(scores[i], threshold)) {
      joined.push_back({scores[i], positions[i]});
    } else {
      evicted.push_back(i);
    }
  }
  const int over = T - static_cast<int>(evicted.size()) - std::max(0, cap);
  if (over > 0 && !record.pool_held) {  // the cap binds for the first time: rank the whole pool
    record.pool.clear();
    for (int i = sinks; i < std::max(sinks, end0); ++i) record.pool.push_back({scores[i], positions[i]});
    std::make_heap(record.pool.begin(), record.pool.end(), pool_order);
    record.pool_held = true;
  }
  if (record.pool_held) {
    for (const PoolEntry& e : joined) {
      record.pool.push_back(e);
      std::push_heap(record.pool.begin(), record.pool.end(), pool_order);
    }
    const auto first_unprotected = positions.begin() + sinks;
    const auto end_unprotected = positions.begin() + end;
    for (int n = 0; n < over; ++n) {  // the pool holds at least `over` (protected_count <= cap)
      std::pop_heap(record.pool.begin(), record.pool.end(), pool_order);
      const int32_t p = record.pool.back().position;
      record.pool.pop_back();
      evicted.push_back(static_cast<int>(std::lower_bound(first_unprotected, end_unprotected, p) - positions.begin()));
    }
    std::sort(evicted.begin(), evicted.end());
  }
  record.length = T - static_cast<int>(evicted.size());
  record.sinks = sinks;
  record.stamp = 0;  // the caller's, once the head is edited
  return evicted;
}

std::vector<int> kept_without(int length, std::span<const int> evicted) {
  std::vector<int> kept;
  kept.reserve(static_cast<size_t>(std::max(0, length - static_cast<int>(evicted.size()))));
  size_t e = 0;
  for (int i = 0; i < length; ++i) {
    if (e < evicted.size() && evicted[e] == i) {
      ++e;
      continue;
    }
    kept.push_back(i);
  }
  if (e != evicted.size()) throw std::invalid_argument("kept_without: evicted indices not ascending within the head");
  return kept;
}

}  // namespace kvevict
