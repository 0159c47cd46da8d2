#pragma once
// Independent references for the policies that read token pairs (a second token axis), written
// from each method's formula and its reference code's rule, in double, from the raw signals
// recorded by reference::collect (window attention computed in double from the recorded queries
// and keys; post-RoPE keys), NOT from the DSL or the engine's selection code. Ties: higher score
// first, then smaller original position (the engine's rule).
#include "reference_policies.h"

namespace kvevict::reference {

struct RkvParams {
  int window = 8, kernel = 7;
  double mix_lambda = 0.07, threshold = 0.5;
  bool retain_last = true;  // retain_direction "last" (else "first")
  bool gqa_max = true;      // the group's heads pooled by max (else mean)
};

// R-KV (Zefan-Cai/R-KV R1KV.update_kv at prefill, cal_similarity): the window (`window` newest
// entries) kept plus the top budget - window of the others by
// mix_lambda * maxpool(importance) - (1 - mix_lambda) * redundancy. `p` must be collected with
// `window` rows.
KeptSets rkv(const PromptData& p, int budget, const RkvParams& rp);

// The redundancy of one head's keys ([S][d]): softmax over the columns of the mean over the rows
// of the cosine similarity, diagonal zeroed and each row's last (or first) above-threshold column
// zeroed (column 0 when none is above).
std::vector<double> rkv_redundancy(const std::vector<float>& keys, int S, int d, double threshold, bool retain_last);

}  // namespace kvevict::reference
