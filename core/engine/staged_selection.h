#pragma once
// Staged selection (policy file `select.stages`; kvpress ComposedPress): at prefill the stages run
// one after the other on each head, each scoring what the earlier stages left with its own score
// program (the engine recomputes that program's signals on the shrunk cache, as a composed press
// sees the keys its predecessor kept) and keeping its top entries with the engine's selection
// (protected entries first, the tie rule of selection.h). This header holds the rules that are the
// stages' own: how many entries a stage keeps, and the shared-budget variant (select_shares).
#include <cstdint>
#include <span>
#include <vector>

namespace kvevict {

// Entries a stage keeps of a head holding `length`: floor(keep x length) when keep > 0 (kvpress's
// int(k_len x (1 - compression_ratio)) with keep = 1 - compression_ratio; keep is first rounded to
// 6 decimals, undoing the DSL's float32 evaluation of the setting), else `budget`; the last stage
// keeps at most `budget` (the memory bound holds whatever the fractions say: earlier stages only
// order the work, the cache is at its prefill size until the last one); never below 0 or above length.
int stage_keep_count(int length, double keep, int budget, bool last);

// Stages with shares (PolicySelect::Stage::share): one head, every stage's scores on the same
// entries. The head keeps its protected entries (selection.h; at most `budget`); of the free budget
// F = budget - |protected|, stage i < last takes the floor(share_i x F) best candidates (tie rule)
// that earlier stages did not take, and the last stage takes the rest, F minus what they took.
// Returns kept cache indices, ascending position (or with score_order: stage by stage, each in rank
// order, then the protected entries).
std::vector<int> select_shares(const std::vector<std::span<const float>>& stage_scores, std::span<const int32_t> positions,
                               const std::vector<double>& shares, int budget, int protect_first, int protect_recent,
                               bool score_order);

}  // namespace kvevict
