#pragma once
// Independent references for the policies that read the query signals (policies/field/
// expected_attention.yaml, finch.yaml), written from kvpress's ExpectedAttentionPress and
// FinchPress in double from the raw recorded post-RoPE queries, keys and values of every prompt
// position (reference::record_qkv), NOT from the DSL, the engine's query statistics or its
// selection. RoPE is undone and averaged here from the model config's theta and pairing directly.
// Ties: higher score first, then smaller position.
#include <vector>

#include "core/model/model.h"
#include "reference_chunk_policies.h"

namespace kvevict::reference {

// The pre-RoPE vector of a post-RoPE head vector x at position pos (rotated back in double).
std::vector<double> unrotate(const float* x, int pos, const ModelConfig& c);
// The mean RoPE matrix over positions p0 .. p0 + n - 1, [d][d] row-major: R x = mean_p rope(x, p).
std::vector<double> mean_rope_matrix(const ModelConfig& c, int p0, int n);

// Mean [Hq][d] and covariance / n [Hq][d][d] of layer l's pre-RoPE queries at positions >= from.
void query_moments(const PromptQkv& p, const ModelConfig& c, int layer, int from, std::vector<double>& mean,
                   std::vector<double>& cov);

struct ExpectedAttentionParams {
  int n_future = 512, n_sink = 4;
  bool covariance = false, vnorm = true;
  double epsilon = 0;
};
// kvpress ExpectedAttentionPress: mu' = R mu (cov' = R cov R^T), logits k . mu' / sqrt(d)
// (+ k^T cov' k / 2d) over the non-sink keys, softmax, mean over the group, (s + eps) |v|; the
// sinks kept and the top budget - n_sink of the rest. Ranked by the log of that score (the same
// order; double probabilities would underflow where the covariance term spreads the logits).
// ExpectedAttentionPress's log score log((s + eps) |v|) (or log s without vnorm) of every position
// t >= ep.n_sink of KV head kv of layer l, from the PRE-RoPE statistics mean [Hq][d] and cov
// [Hq][d][d] of the layer (rotated here by the mean RoPE over positions S .. S + n_future - 1).
// Positions < n_sink score -infinity (the caller protects them).
std::vector<double> expected_attention_log_scores(const PromptQkv& p, const ModelConfig& c, int l, int kv,
                                                  const std::vector<double>& mean, const std::vector<double>& cov,
                                                  const ExpectedAttentionParams& ep);

KeptSets expected_attention(const PromptQkv& p, const ModelConfig& c, int budget, const ExpectedAttentionParams& ep);

// kvpress FinchPress (chunk_length None): the window is the tokens after the last `delimiter`;
// causal window attention (softmax over every visible key), row p scaled by p when normalize,
// mean over the rows and the group; the window kept first, then the top of the context. A prompt
// without the delimiter takes the last `fallback` tokens as the window (kvpress asserts instead).
KeptSets finch(const PromptQkv& p, const std::vector<int>& tokens, int budget, int delimiter, bool normalize,
               int fallback = 0);

}  // namespace kvevict::reference
