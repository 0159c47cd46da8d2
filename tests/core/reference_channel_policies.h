#pragma once
// Independent reference for key-channel pruning (ThinK, arXiv 2407.21018; kvpress ThinKPress),
// written from the formula in double from recorded post-RoPE window queries and cached keys, NOT
// from the DSL, the interpreter or core/engine/channel_selection.*:
//   score_c = mean over the G query heads g of KV head `kv_head` of mean over the rows r of q_{r,g,c}^2
//             x mean over the given keys t of k_{t,c}^2
//   pruned  = the floor(ratio x d) channels of lowest score, ties to the lower channel index.
#include <cstdint>
#include <vector>

#include "reference_field_policies.h"

namespace kvevict::reference {

// Scores of every channel of one KV head: `rows` are the window query rows ([n_heads][d] each),
// `keys` the [n][d] post-RoPE keys the head holds after the token selection.
std::vector<double> think_channel_scores(const std::vector<QueryRow>& rows, const std::vector<float>& keys, int kv_head,
                                         int G, int d);

// The channels ThinKPress zeroes for these scores, ascending.
std::vector<int> think_pruned_channels(const std::vector<double>& scores, double ratio);

}  // namespace kvevict::reference
