#pragma once
// Independent reference of NACL's spec §8 options, written from shared/spec/policies.md §3 (not
// from the DSL, the engine's selection or its attention code):
//   proxy_causal    §3.5 item 3: the proxy rows' softmax with or without the causal mask
//   keep_proxy      §3.1 vs §3.2: the whole proxy span P kept, or only sinks + recent
//   gqa_head_map    §3.5 item 1: KV head j scored by query head j alone (official code's rows)
//   decode_interval §3.1 Alg. 1: every m decode steps, the same rule re-applied to the cache
// Selection follows the engine's documented contract (docs/ENGINE.md "Selection"): protected
// entries count inside the budget, n_random = floor(random_share * free), top-k by (score desc,
// position asc), the rest sampled without replacement from softmax(score / T) by Gumbel-top-k with
// the Philox draw of (seed, layer, kv_head, position) (core/engine/counter_rng.h, shared on purpose:
// "the same random numbers" is part of the contract), with the seed of a decode-time application
// at step s being seed + s * 0x9E3779B97F4A7C15 (mod 2^64).
#include <cstdint>
#include <vector>

#include "core/model/model.h"
#include "reference_policies.h"

namespace kvevict::reference {

struct NaclVariant {
  int budget = 32;              // per (layer, KV head), protected entries included
  int sinks = 4, recent = 8;    // protected: positions < sinks and the `recent` newest entries
  double random_share = 0.5;    // of the free budget
  double temperature = 1.0;
  uint64_t seed = 0;
  bool keep_all_proxy = false;  // also protect the proxy span P = the W newest positions
  bool code_head_map = false;   // KV head j scored by query head j (its rows live in KV head j / G's data)
};

// The prefill decision from one prompt's attention data (causal or not: the caller's choice of
// collect with causal_window true or false).
KeptSets nacl_variant(const PromptData& p, const NaclVariant& v);

struct NaclDecodeParams {
  NaclVariant v;
  int proxy = 16;          // W: the newest W queries score (the prompt's tail at prefill)
  bool causal = false;
  int interval = 4;        // re-apply every `interval` decode steps (1-based step % interval == 0)
};

// Runs `prompt` and then each of `forced` as one decode step through the CPU decoder, applying
// NACL at prefill and every `interval` decode steps to heads holding more than the budget, with
// the attention computed here in double from the recorded queries and the cache's keys. Returns
// the kept positions after the last step, [layer][kv_head] ascending.
KeptSets nacl_with_decode(const Model& model, const std::vector<int>& prompt, const std::vector<int>& forced,
                          const NaclDecodeParams& params);

}  // namespace kvevict::reference
