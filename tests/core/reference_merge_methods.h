#pragma once
// Independent references for the merge-on-evict methods beyond reference_merge.h's nearest-key
// rules, written in double from the methods' own descriptions (never from the engine's code):
//   cam: kvpress CAMPress.compress (kvpress/presses/cam_press.py), step by step as its docstring
//   lists them (score & select, pick merge candidates, merge windows, merge probability, Bernoulli,
//   scatter-add of the values), in scatter form over each candidate's window.
//   d2o: D2O's D2O_LayerKVCache merge (AIoT-MLSys-Lab/D2O), in gather form per kept entry.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace kvevict::reference {

using Rows = std::vector<std::vector<double>>;  // [entry][channel]

// The attention one decode query gives a head's entries: the mean over the query heads of the
// group of softmax_t(q_g . k_t / sqrt(d)). queries: [group][d]; keys: [entry][d].
std::vector<double> group_attention(const Rows& queries, const Rows& keys);

// CAMPress's merge on one head. `values`, `attention` (the running decode-time attention) and
// `scores` (what the selection ranked) are per entry in cache order; `kept` are the surviving
// indices; `uniform(e)` is the Bernoulli draw's uniform number for evicted entry e (merges when
// below the probability). Returns every entry's value after the merge (evicted rows unchanged) and
// adds the number of candidates and of merged candidates to the counters.
Rows cam_merge(const Rows& values, const std::vector<double>& attention, const std::vector<double>& scores,
               const std::vector<int>& kept, int new_tokens, int merge_budget, const std::function<double(int)>& uniform,
               int& candidates, int& merged);

// KnormPress's score averaged over a layer's KV heads (CAMPress's mean_scores): mean_h -|k_{h,t}|,
// each norm rounded to float as the key_norm signal is. keys: [kv head][entry][d].
std::vector<double> cam_knorm_scores(const std::vector<Rows>& keys);
// CAMPress's selection on one layer: the target_size entries of highest cam_knorm_scores
// (ties: the earlier entry), ascending.
std::vector<int> cam_knorm_kept(const std::vector<Rows>& keys, int target_size);

struct HeadRows {
  Rows keys, values;  // [entry][d], cache order
};

// D2O's merge of one eviction of a layer: kept[h] are head h's surviving indices (ties of the best
// cosine go to the first of them). Each evicted entry's best cosine s_e with a kept key (norms
// clamped at 1e-6); m = the mean of s_e over every head's evicted entries; tau = m the first time
// (tau empty), alpha * tau + beta * m after; s_e >= tau merges, and each kept j becomes
// (x_j + sum s_e x_e) / (1 + |M_j|) for keys and values. Returns head h's kept rows in kept order;
// `merged` counts the merged entries.
std::vector<HeadRows> d2o_merge(const std::vector<HeadRows>& heads, const std::vector<std::vector<int>>& kept, double alpha,
                                double beta, std::optional<double>& tau, int& merged);

// H2O's kept set with sinks, as D2O selects: the first `sinks` and the last `recent` entries, and
// the rest of the budget by the highest accumulated attention (ties: the earlier entry); ascending.
std::vector<int> h2o_with_sinks(const std::vector<double>& accumulated, int budget, int sinks, int recent);

}  // namespace kvevict::reference
