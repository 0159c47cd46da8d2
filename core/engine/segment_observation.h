#pragma once
// The segment-local attention A_seg (signals.h; PolicyObserve::segment), for ChunkPress's
// per-chunk observation windows and NonCausalAttnPress's chunked attention.
//
// The prompt's positions 0..S-1 are cut into segments of C = observe.segment positions (segment s
// = positions s*C .. min(s*C + C, S) - 1; the last one may be shorter). The observation queries of
// segment s are its own last min(W, length) queries (W = observe.window). Each observation query
// at position p gets a softmax over the keys of its own segment only (entries whose original
// position lies in p's segment), causal by position unless observe.causal is false. A_seg[g][t] is
// the sum, over the observation queries of t's segment, of query head g's probability of entry t;
// an entry of no segment with queries (none at prefill) gets 0.
//
// Bounds: the queries held are min(W, C) rows of n_heads x head_dim floats per segment and layer
// (at most the S query rows of the prompt, what the decoder already holds for a block); one head's work
// buffer is G x min(W, C) x C floats plus C keys and T entry indices, and the output is G x T;
// the work is W x C x d per segment and query head. Never S x S.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvevict {

class SegmentQueries {
 public:
  // Starts a prompt of `prompt_len` positions: segments of `segment` positions (> 0), `window`
  // observation queries each (> 0), rows of `row_floats` floats (n_heads * head_dim).
  void reset(int n_layers, int segment, int window, int prompt_len, size_t row_floats);
  // Whether the query at `position` is an observation query of its segment.
  bool observes(int position) const;
  // Keeps, out of `n_rows` consecutive query rows ([n_rows][row_floats]) at positions
  // first_position.., those that are observation queries (a row seen twice is kept once).
  void record(int layer, const float* rows, int n_rows, int first_position);
  int rows(int layer) const { return static_cast<int>(positions_[layer].size()); }

  // A_seg of one KV head: `out` [group][T] (T entries with original positions `positions` and
  // post-RoPE `keys` [T][d]); query heads kv_head * group .. + group - 1 of the n_heads held.
  void attention(int layer, int kv_head, int group, int n_heads, const float* keys, const int32_t* positions, int T,
                 int d, bool causal, bool scaled, float* out) const;

 private:
  int segment_ = 0, window_ = 0, prompt_len_ = 0;
  size_t row_floats_ = 0;
  std::vector<std::vector<float>> data_;         // [layer][rows][row_floats], ascending position
  std::vector<std::vector<int32_t>> positions_;  // [layer][rows]
};

}  // namespace kvevict
