#pragma once
// Key-channel pruning (ThinK, arXiv 2407.21018; kvpress ThinKPress): a channel-selection stage run
// once at the end of prefill, after the token selection. For each (layer, KV head) the policy's
// `channel_score` program gives one score per key channel d (ThinK: mean over the window queries
// and the group's query heads of q_d^2, times the mean over the cached keys of k_d^2, post-RoPE);
// the n = floor(prune x head_dim) channels of lowest score are zeroed in every cached key of that
// head, as kvpress does (keys.scatter_(-1, indices, 0)).
//
// WHAT IS PRUNED. Only the keys cached at the end of prefill (the entries the token selection kept,
// whose keys the scores read: kvpress ComposedPress runs ThinK on SnapKV's output). Keys appended
// while decoding keep every channel: ThinKPress compresses only in the prefill forward pass, and
// the decoder's new keys enter the cache unpruned. Values are never touched.
//
// MEMORY. Zeroed channels are still stored (the cache keeps head_dim floats per key, as kvpress's
// keys keep their shape): the stage changes attention, not bytes. The eviction report counts the
// zeroed channels (EvictionReport::pruned_key_channels), never a byte saving.
//
// TIE RULE. Channels are ranked by ascending score; equal scores prune the lower channel index
// first; a NaN score ranks below every number (pruned first), NaNs among themselves by index.
#include <cstdint>
#include <span>
#include <vector>

#include "core/engine/policy_program.h"

namespace kvevict {

class KVCache;

// floor(prune x head_dim) computed as kvpress's int(head_dim * ratio), clamped to [0, head_dim].
int pruned_channel_count(int head_dim, double prune);

// The `n` channels to zero for these scores (ascending channel index), by the tie rule above.
// n is clamped to [0, scores.size()].
std::vector<int> select_pruned_channels(std::span<const float> scores, int n);

// Zeroes channels `channels` (each in [0, head_dim)) of every key of dense stored head
// (layer, head); values and positions are unchanged. Throws std::invalid_argument on a channel out
// of range, std::logic_error on a codebook head (the engine refuses codebooks with channels).
void zero_key_channels(KVCache& cache, int layer, int head, std::span<const int> channels);

// One head's stage: runs policy.channel_score(in), selects and zeroes. Returns the channels zeroed.
// `in` must describe stored head (in.layer, in.kv_head) of `cache` with in.head_dim channels.
std::vector<int> prune_head_channels(const PolicyProgram& policy, const ScoreInputs& in, KVCache& cache);

}  // namespace kvevict
