#pragma once
// Independent reference implementations of every built-in policy's prefill decision, written from
// the formulas of shared/spec/policies.md (section numbers below), NOT from the DSL or the engine's
// selection code. Input: the full-prompt signals of every (layer, KV head); output: kept original
// positions, ascending. Ties everywhere: higher score first, then smaller position (the engine's
// documented rule). The only shared piece is the Philox draw (core/engine/counter_rng.h), because
// "same random numbers" is part of the spec of `random` and NACL's sampling.
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace kvevict::reference {

struct HeadData {
  int S = 0, G = 1, W = 0, d = 0;
  std::vector<double> window_attention;  // [G][W][S] causal softmax of the last W queries (double)
  std::vector<double> accumulated;       // [G][S] column sums of the causal attention of all S queries
  std::vector<float> keys;               // [S][d] post-RoPE
  std::vector<float> values;             // [S][d]
};
using PromptData = std::vector<std::vector<HeadData>>;  // [layer][kv_head]
using KeptSets = std::vector<std::vector<std::vector<int>>>;  // [layer][stored head] ascending positions

// Runs the prompt through the CPU decoder (full cache) and computes every head's attention in double
// directly from the recorded queries and cached keys. `window` rows of window attention, causal, or
// with causal_window = false seeing all S keys (NACL's official proxy scoring); the accumulated
// attention is always causal.
PromptData collect(const Model& model, const std::vector<int>& tokens, int window, bool causal_window = true);

KeptSets full(const PromptData& p);
// The uniform draw of the `random` score. Default: Philox (counter_rng.h, kScoreStream), which is
// also the DSL's random() (docs/DSL.md §7); the parameter lets a test pass another draw.
using UniformFn = float (*)(uint64_t seed, int layer, int kv_head, int position);
float philox_score_uniform(uint64_t seed, int layer, int kv_head, int position);
KeptSets random_policy(const PromptData& p, int budget, uint64_t seed,
                       UniformFn uniform = philox_score_uniform);                         // §5.7
KeptSets streamingllm(const PromptData& p, int budget, int n_sink);                      // §5.1
KeptSets h2o_one_shot(const PromptData& p, int budget, int recent);                      // §5.2
KeptSets tova(const PromptData& p, int budget);                                          // §5.3
struct SnapParams { int window = 32, kernel = 5; bool max_pool = false; };
KeptSets snapkv(const PromptData& p, int budget, const SnapParams& sp);                  // §5.4
std::vector<int> pyramid_layer_budgets(int L, int S, int budget, int window, int beta);  // §5.5 (non-window)
KeptSets pyramidkv(const PromptData& p, int budget, const SnapParams& sp, int beta);     // §5.5
KeptSets adakv(const PromptData& p, int budget, const SnapParams& sp, double floor_alpha);  // §5.6
KeptSets knorm(const PromptData& p, int budget);                                         // §5.8

struct CakeParams {
  int window = 32;
  double gamma = 200, tau1 = 1, tau2 = 1;
  bool code_rounding = false;
  enum class Pool { Avg, Max, None } pool = Pool::Avg;  // §8 cake.pool (avg: zero padding counted)
  int kernel = 5;
  bool renormalise_rows = false;  // §8 cake.renormalise_rows: rows of A_sub divided by their sum
};
// 1-D pooling along a sequence, stride 1, padding kernel/2: avg counts the zero padding, max
// ignores it (max_pool1d's -inf padding), none returns x.
std::vector<double> cake_pool(const std::vector<double>& x, const CakeParams& cp);
std::vector<double> cake_preferences(const PromptData& p, const CakeParams& cp);          // §2.3
std::vector<std::vector<double>> cake_indicator(const HeadData& h, const CakeParams& cp);  // §2.4 [G][S-W] pooled
std::vector<int> cake_budgets(const std::vector<double>& pref, int S, int budget, const CakeParams& cp);  // §2.5 non-window
KeptSets cake(const PromptData& p, int budget, const CakeParams& cp);

struct NaclParams { int sinks = 4, recent = 8, top = 10, random = 10; double temperature = 1; uint64_t seed = 0; };
KeptSets nacl(const PromptData& p, const NaclParams& np);                                 // §3.2, proxy = window rows

// sinks: first tokens protected inside the budget (the ramp then shares out what the window and the
// sinks leave); kernel > 0: the per-query-head indicator of the non-window tokens is pooled first
// (avg counting zero padding, or max), as kvevict's spindle.pool option defines it.
struct SpindleParams {
  int window = 8;
  double ratio = 0.4, beta = 0.05;
  bool unfold = true;
  int sinks = 0, kernel = 0;
  bool max_pool = false;
};
std::vector<int> spindle_layer_keep(int L, int S, const SpindleParams& sp);              // §4.1 non-window per layer
KeptSets spindlekv_eviction(const PromptData& p, const SpindleParams& sp);               // [layer][query head] if unfold

}  // namespace kvevict::reference
