#pragma once
// Chunk-structured selection of one head (PolicySelect::unit / quota / chunk; ChunkKV, ChunkPress).
//
// Chunk c holds the entries whose original position lies in c*chunk .. c*chunk + chunk - 1 (so the
// last chunk of a prompt that chunk does not divide is shorter: kvpress's boundary chunk). Protected
// entries are taken first exactly as select_head does (selection.h: sinks, then recent ones, inside
// the budget; when they fill it they alone are kept by that priority); the chunk rules share out the
// free budget F = budget - protected over the other entries (the candidates). budget >= T keeps all.
//
// select_whole_chunks (unit chunk): a chunk's score is chunk_score (mean, sum or max) of its
// candidates' scores and its cost is its number of candidates. Chunks are ranked by score, higher
// first, ties to the smaller chunk index (the token rule's smaller position), NaN lowest. The kept
// chunks are the longest prefix of that ranking whose costs add up to at most F: whole chunks
// only, so fewer than F entries may be kept (kvpress keeps int(n_chunks * (1 - r)) top chunks; that
// is the same count whenever chunk divides the prompt and F; with a shorter last chunk kvpress can
// exceed the budget, this never does).
//
// select_per_chunk (quota per_chunk): chunk c with n_c candidates keeps its top q_c by the token
// tie rule, where q_c are F split in proportion to n_c by allocate_budgets (largest remainder, ties
// to the lower chunk), so they add up to exactly F (kvpress's per-chunk int(len * (1 - r)) floors
// each chunk and may keep fewer).
//
// Kept indices are cache indices in ascending original position, or with score_order (kept_order
// score): the chosen candidates by rank (whole chunks: chunk by chunk in chunk rank order, each in
// position order; per chunk: by the token tie rule over all chunks), then the protected entries by
// position, as select_head orders its top-k and protected entries.
#include <cstdint>
#include <span>
#include <vector>

#include "core/engine/policy_modes.h"

namespace kvevict {

struct ChunkSelectionSpec {
  int budget = 0;
  int protect_first = 0;
  int protect_recent = 0;
  int chunk = 1;  // > 0
  ChunkScore chunk_score = ChunkScore::Mean;
  bool score_order = false;
};

std::vector<int> select_whole_chunks(std::span<const float> scores, std::span<const int32_t> positions,
                                     const ChunkSelectionSpec& spec);

std::vector<int> select_per_chunk(std::span<const float> scores, std::span<const int32_t> positions,
                                  const ChunkSelectionSpec& spec);

}  // namespace kvevict

namespace kvevict {
struct PolicySelect;

// Whether `select` asks for a chunk rule (unit chunk or quota per_chunk).
bool chunked_selection(const PolicySelect& select);
// The kept entries of one head (or of a layer_shared layer's mean scores) under `select`'s chunk
// rule; chunked_selection(select) must hold.
std::vector<int> select_chunked(std::span<const float> scores, std::span<const int32_t> positions,
                                const PolicySelect& select, int budget, int protect_first, int protect_recent);
}  // namespace kvevict
