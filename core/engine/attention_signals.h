#pragma once
// The signals a score program reads, computed from a KV head's cache entries.
//
// Window attention: for each query head g of the group and each of the W recorded window queries
// (post-RoPE, at positions query_position0 .. query_position0 + W - 1), softmax in fp32 over the
// head's T cache entries of q . k / sqrt(d), causal by original positions: entry t is visible to a
// query at position p iff position[t] <= p (invisible entries get probability 0). With causal =
// false every entry is visible to every query (NACL's official proxy scoring, spec §3.5 item 3).
// scaled = false: logits q . k without the 1/sqrt(d) (A_seg of NonCausalAttnPress's official code).
// Cost W*T*d per query head; never an S x S matrix.
#include <cstdint>
#include <vector>

namespace kvevict {

// queries: [W][n_heads][d] (the decoder's window_queries layout). out: [G][W][T].
void compute_window_attention(const float* queries, int W, int n_heads, int query_position0, int kv_head, int group,
                              const float* keys, const int32_t* positions, int T, int d, float* out,
                              bool causal = true, bool scaled = true);

}  // namespace kvevict
