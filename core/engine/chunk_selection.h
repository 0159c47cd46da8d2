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
  int rescue = 0;  // select_entropy_gated only, >= 1
};

std::vector<int> select_whole_chunks(std::span<const float> scores, std::span<const int32_t> positions,
                                     const ChunkSelectionSpec& spec);

std::vector<int> select_per_chunk(std::span<const float> scores, std::span<const int32_t> positions,
                                  const ChunkSelectionSpec& spec);

// select_entropy_gated (unit chunk, gate entropy; kvpress EntropyGatedChunkKVPress, PR #263):
// chunk c's score S_c is chunk_score of its candidates' scores, its normalised entropy
// H_c = clamp(-sum p log(p + 1e-8) / log(n_c), 0, 1) with p = x / (sum x + 1e-8), x its candidates'
// scores shifted by their minimum when that is negative (non-finite scores count as 0), and 0 for
// a chunk of one candidate. A chunk is high when S_c >= the median of S and spiky when H_c < the
// median of H minus 1e-9 (the median of n values: the lower middle one, as torch.median; the
// margin gives chunks with equal entropies, e.g. the same values in another order, one verdict
// whatever the rounding of the sums). Chunks are visited by S_c, higher first (ties to the
// smaller chunk, NaN last) while budget is left: each keeps its top min(n_c, left) candidates by
// the token rule, at most `rescue` of a high and spiky chunk.
// What is left at the end goes to the best remaining candidates by the token rule, so exactly F
// candidates are kept (F = the free budget; all of them when fewer).
std::vector<int> select_entropy_gated(std::span<const float> scores, std::span<const int32_t> positions,
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
