#pragma once
// Independent references for the chunk-structured policies of policies/field/ (chunkkv,
// chunkpress, noncausal_attn), written from kvpress's rules as the files' `about` lines cite them,
// in double, from the raw recorded queries, keys and values of every prompt position, NOT from the
// DSL, the engine's A_seg or its chunk selection. Where kvpress leaves a rule open to our budget
// semantics (whole chunks inside a token budget, per-chunk quotas that add up to the budget) the
// reference follows the rule stated in core/engine/chunk_selection.h, re-derived here in integers.
// Ties: higher score first, then smaller position (chunks: smaller chunk index).
#include <cstdint>
#include <vector>

#include "core/model/model.h"
#include "reference_policies.h"

namespace kvevict::reference {

// What the prompt left behind: post-RoPE queries of every position and the full cache.
struct PromptQkv {
  int S = 0, L = 0, Hq = 0, Hkv = 0, G = 1, d = 0;
  std::vector<std::vector<float>> q;               // [layer][S][Hq][d]
  std::vector<std::vector<std::vector<float>>> k;  // [layer][kv head][S][d] post-RoPE
  std::vector<std::vector<std::vector<float>>> v;  // [layer][kv head][S][d]
};
PromptQkv record_qkv(const Model& model, const std::vector<int>& tokens);

// The kvpress SnapKVPress inner score (window `window`, avg-pool `kernel`) of every position.
struct SnapInner { int window = 64, kernel = 5; };

// ChunkKVPress over SnapKV: the window tokens score the head's maximum (policies/field/chunkkv.yaml),
// heads averaged, chunk mean, the longest prefix of the chunk ranking that fits the budget.
KeptSets chunkkv(const PromptQkv& p, int budget, int chunk, const SnapInner& sp);
// ChunkPress over SnapKV: each chunk scored alone with its own last `window` queries over its own
// keys; its window tokens first; quotas = the budget split by chunk length, largest remainder.
KeptSets chunkpress(const PromptQkv& p, int budget, int chunk, const SnapInner& sp);
// EntropyGatedChunkKVPress over SnapKV: the layer scores of chunkkv(), then the entropy gate.
KeptSets entropy_gated_chunkkv(const PromptQkv& p, int budget, int chunk, int rescue, const SnapInner& sp);
// NonCausalAttnPress: chunked non-causal unscaled attention column sums, group mean, x |v|,
// avg-pool 3, z-norm, top-k per KV head.
KeptSets noncausal_attn(const PromptQkv& p, int budget, int chunk);

// The two chunk rules on plain numbers (for the hand-built cases too): kept positions ascending of
// one head with positions 0..n-1 and these scores, no protected entries.
std::vector<int> whole_chunks_keep(const std::vector<double>& score, int chunk, int budget, int aggregate /*0 mean 1 sum 2 max*/);
std::vector<int> per_chunk_keep(const std::vector<double>& score, int chunk, int budget);
std::vector<int> entropy_gated_keep(const std::vector<double>& score, int chunk, int budget, int rescue);

}  // namespace kvevict::reference
