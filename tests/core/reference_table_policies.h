#pragma once
// Independent references for the table-driven policies of policies/field/ (duo_attention, rlkv,
// headkv, per_layer_compression, qfilter; lukv: reference_stats_table_policies.h), written from each method's rule as the policy
// file's comment cites it, in double, from the recorded prompt signals of reference::collect and
// the table files read by a reader of their own (not the DSL's loader). Budgets are split by a
// plain largest-remainder rule of its own (floors first, the rest in proportion, ties to the lower
// index), not by core/engine/budget_allocator. Ties in top-k: higher score, then smaller position.
#include <string>
#include <vector>

#include "reference_policies.h"

namespace kvevict::reference {

using Table = std::vector<std::vector<double>>;  // rows of a table file (comments and blanks skipped)

// The numbers of a tab-separated table file, row by row.
Table read_table(const std::string& path);

// Integer split: floor[i] each, then (total - sum floor) in proportion to weight[i], largest
// remainder, ties (within 1e-6) to the lower index. Throws when a result exceeds cap[i] (the
// reference does not water-fill; tests choose budgets where no cap binds).
std::vector<int> split_exact(const std::vector<double>& weight, const std::vector<int>& floor, int64_t total,
                             const std::vector<int>& cap);

// DuoAttention / RLKV: full[l][h] keeps every position; the other heads keep the first `sinks` and
// the last `recent` positions.
KeptSets full_or_streaming(const PromptData& p, const std::vector<std::vector<bool>>& full, int sinks, int recent);
// DuoAttention: the round(ratio * n) lowest scores (stable by table order) are streaming.
std::vector<std::vector<bool>> duo_full_heads(const Table& scores, double ratio);
// RLKV: the round(share * n) highest gates are full (the others streaming), ties by table order.
std::vector<std::vector<bool>> rlkv_full_heads(const Table& gates, double share);

// kvpress QFilterPress: score = -<filter[l * H + h], k_t> (post-RoPE keys), top-k per head.
KeptSets qfilter(const PromptData& p, const Table& filters, int budget);

// kvpress PerLayerCompressionPress around KnormPress: layer l gets a share of budget x L tokens
// per head in proportion to 1 - ratio[l] (split_exact, no floors); lowest key norms kept.
std::vector<int> per_layer_compression_budgets(const PromptData& p, const std::vector<double>& ratio, int budget);
KeptSets per_layer_compression(const PromptData& p, const std::vector<double>& ratio, int budget);

// Per-head budgets of HeadKV: the layers split budget x L (floors = the protected count
// `prot`) by layer weight = sum of their heads' weights, then each layer's H x b_l over its heads
// (floors = prot) by head weight. [layer][head].
std::vector<std::vector<int>> head_budgets(const PromptData& p, const Table& head_weight, int budget, int prot);

// HeadKV: head weight 1/beta + s[l][h] x N x (1 - 1/beta), s the table over its sum; SnapKV score
// over the last `window` rows of the recorded window attention (sum over rows, tokens of the
// window scored 0, max-pooled over `kernel`, mean over the group), the window kept.
KeptSets headkv(const PromptData& p, const Table& scores, int budget, int window, int kernel, double beta);
Table headkv_weights(const Table& scores, double beta);

}  // namespace kvevict::reference
