#pragma once
// Independent references for the table policies of policies/field/ that need the newer table axes
// (expected_attention_stats.yaml: per-(layer, query head) statistics [layer, head, d(, e)];
// lukv.yaml: the budget curve [index, layer, kv_head]), written from kvpress's
// ExpectedAttentionStatsPress and LUKVPress in double from the recorded post-RoPE queries, keys
// and values (reference::record_qkv) and the table files (reference::read_table), NOT from the
// DSL, the engine's query statistics, its head-budget rounding or its selection. Ties: higher
// score first, then smaller position.
#include <vector>

#include "core/model/model.h"
#include "reference_query_policies.h"
#include "reference_table_policies.h"

namespace kvevict::reference {

// kvpress ExpectedAttentionStatsPress: the statistics of layer l are rows l * Hq .. of the mean
// table ([layer, head] rows of d numbers) and rows (l * Hq + h) * d .. of the covariance table;
// the first n_sink kept and the top budget - n_sink of the rest.
KeptSets expected_attention_stats(const PromptQkv& p, const ModelConfig& c, const Table& mean_rows, const Table& cov_rows,
                                  int budget, const ExpectedAttentionParams& ep);

// kvpress LUKVPress's keep counts [layer][kv head] at `ratio` for a prompt of S tokens: row
// int(round(ratio * 100)) - 1 (half to even) clamped to [0, 98] of the curve (rows r * L + l of
// H numbers); per layer c_h = clamp(1 - prune, 0, 1) * S, the total round(sum) clamped to
// [H, H * S], floors, the remainder to the largest fractional parts (ties: lower head), each in
// [1, S] (the rates and counts in float32, as the press). ratio <= 0: S everywhere.
std::vector<std::vector<int>> lukv_counts(const Table& curve, int L, int H, double ratio, int S);

// kvpress LUKVPress around ExpectedAttentionPress(ep) (prompt statistics): the first `sink` and
// the last `window` positions rank first (ascending position), then the scorer's n_sink sinks,
// then the rest by score; each head keeps its lukv_counts count.
KeptSets lukv(const PromptQkv& p, const ModelConfig& c, const Table& curve, double ratio, int sink, int window,
              const ExpectedAttentionParams& ep);

// The score lukv ranks the unprotected positions of (layer l, KV head kv) by:
// expected_attention_log_scores with the layer's prompt statistics (for near-tie checks).
std::vector<double> lukv_scores(const PromptQkv& p, const ModelConfig& c, int l, int kv, const ExpectedAttentionParams& ep);

}  // namespace kvevict::reference
