#pragma once
// Decode steps of a threshold rule over frozen scores (select.threshold with score_at: insertion;
// kvpress's DMSPress, KVzap) decided from the entries that left the recent window, not the head.
//
// Why it holds. Under that rule an entry is scored once, when it enters, and a head keeps its
// protected entries and every other entry whose score is at least the threshold, capped at its
// budget by the tie rule (threshold_selection.h, selection.h). With positions increasing along the
// cache (the positional kept order; decode appends at the end) the protected set is a prefix (the
// sinks, positions < protect_first) and the last protect_recent entries, so appending k entries
// moves at most k entries out of the recent window, and only their fate is open: every other
// unprotected entry passed when it left the window and its score never changes. A leaving entry
// that fails goes. If the entries left then exceed the cap, the lowest-ranked unprotected ones go
// too: the rule's top-k over a pool that only ever gained the leaving entries, kept as a heap
// (worst first) once the cap first binds. The result is select_head's with threshold_budget: the
// same set, in the same (cache) order (tests/core/threshold_steps_test.cpp checks every step of
// long random runs against them), in O(k log T) instead of several O(T) passes per head.
//
// What the engine holds per head (ThresholdWindowRecord) is a fact it checked: at `length`
// entries under the head's edit stamp (KVCache::edit_stamp) and that protection, the positions
// increased along the cache and every unprotected entry passed. A record is made by a full O(T)
// check after any other application (verify_threshold_head) and carried forward by each step.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kvevict {

// An unprotected entry in a head's pool: its frozen score and original position (stable while
// cache indices shift).
struct PoolEntry {
  float score;
  int32_t position;
};

struct ThresholdWindowRecord {
  uint64_t stamp = 0;  // the head's edit stamp when checked; 0: no record
  int length = 0;      // entries then
  int sinks = 0;       // the prefix of entries with positions < protect_first then
  int protect_first = 0, protect_recent = 0;
  // Every unprotected entry, a heap whose front ranks last under the tie rule; built the first time
  // the cap binds (pool_held), then kept in step.
  std::vector<PoolEntry> pool;
  bool pool_held = false;
};

// The full check: a record for a head holding `scores` and `positions` (aligned, cache order)
// under `stamp`, or nullopt when its positions do not increase or an unprotected entry does not
// pass (a score below the threshold, or NaN). O(T).
std::optional<ThresholdWindowRecord> verify_threshold_head(std::span<const float> scores,
                                                           std::span<const int32_t> positions, uint64_t stamp,
                                                           int protect_first, int protect_recent, double threshold);

// One step for a head that `record` describes, now holding `scores` and `positions` under `stamp`
// (entries appended since, none moved: equal stamps). Returns the cache indices to evict,
// ascending, and carries `record` forward to the head without them (its stamp is the caller's to
// set after the edit). Returns nullopt, and clears `record`, when the record does not apply
// (another stamp or protection, fewer entries than recorded, appended positions not increasing)
// or the cap is below the protected count (select_head keeps protected entries by priority then):
// the full rule decides instead.
std::optional<std::vector<int>> threshold_window_step(std::span<const float> scores,
                                                      std::span<const int32_t> positions, uint64_t stamp,
                                                      ThresholdWindowRecord& record, int protect_first,
                                                      int protect_recent, double threshold, int cap);

// The kept list of a head of `length` entries that drops `evicted` (ascending): every other
// index, ascending. std::invalid_argument when `evicted` is not ascending within [0, length).
std::vector<int> kept_without(int length, std::span<const int> evicted);

}  // namespace kvevict
