#pragma once
// SpindleKV's codebook stage over a whole cache (spec policies.md §4.2), run by the engine once the
// prefill eviction is done. Per layer in merge.first_layer .. merge.last_layer (others stay dense):
//   MergeScope::PerHead: one greedy codebook of pre-RoPE keys and one of values per stored head
//     (KVCache::set_codebook);
//   MergeScope::PerLayerAcrossHeads: the pre-RoPE keys (values) of every stored head of the layer
//     form one set of vectors and get one codebook, shared by the layer's heads
//     (KVCache::set_layer_codebook). Identical copies of an unfolded cache then share their codes;
//     indices and norms stay per (token, stored head). Cost O(N^2 d) with N = entries of the whole
//     layer instead of one head (spec §4.5 pitfall 1).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/decode/kv_cache.h"
#include "core/engine/codebook.h"
#include "core/engine/policy_program.h"

namespace kvevict {

struct CodebookStageResult {
  size_t bytes_before = 0, bytes_after = 0;  // cache.bytes_in_use() just before / after
  int64_t key_codes = 0, value_codes = 0;    // codes stored (shared codes counted once per layer)
  int64_t tokens = 0;                        // entries that became codebook-backed (over stored heads)
  int64_t graphs_by_builder = 0;             // similarity graphs the given builder made (keys and values)
};

// Throws UsageError for a scope other than the two above. `graph`: who builds the similarity graphs
// (build_codebook; null: the host).
CodebookStageResult apply_codebook_stage(const PolicyMerge& merge, KVCache& cache,
                                         const SimilarityGraphBuilder* graph = nullptr);

// The layers merge covers in a model of n_layers: [first, last], last_layer -1 or past the end
// meaning the last layer. Throws UsageError (naming `policy`) when the range is empty.
void codebook_layer_range(const PolicyMerge& merge, int n_layers, const std::string& policy, int& first, int& last);

}  // namespace kvevict
