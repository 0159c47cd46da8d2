#pragma once
// What the policy-file tests on stories260K share: one prefill of a prompt under a named policy
// (F32 cache, one thread), and the comparison of its kept sets with a reference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "reference_policies.h"

namespace kvevict::test {

// The report of one prefill of `tokens` under policy `name` with `params` and `budget` (through
// prefill_prompt, the one way a prompt enters under a policy: KVzip's replay runs there).
inline EvictionReport prefill_report(const Model& model, const std::vector<int>& tokens, const std::string& name,
                                     const std::map<std::string, std::string>& params, const std::string& budget) {
  const auto policy = load_policy(name, params);
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, model.config, {Budget::parse(budget), 0});
  prefill_prompt(*decoder, std::span<const int>(tokens), &engine, &engine);
  return engine.report();
}

// Expects every (layer, head) of `got` to hold exactly `want`'s positions; returns how many of
// them evicted something (fewer than `prompt_len` kept), so a test can require > 0.
inline int expect_same_kept(const EvictionReport& got, const reference::KeptSets& want, int prompt_len,
                            const std::string& what) {
  int evicted = 0;
  EXPECT_EQ(got.layers.size(), want.size()) << what;
  for (size_t l = 0; l < want.size() && l < got.layers.size(); ++l)
    for (size_t h = 0; h < want[l].size(); ++h) {
      const std::vector<int32_t> w(want[l][h].begin(), want[l][h].end());
      EXPECT_EQ(got.layers[l][h].kept_positions, w) << what << ": layer " << l << " head " << h;
      evicted += static_cast<int>(w.size()) < prompt_len;
    }
  return evicted;
}

// As expect_same_kept, except for near-ties: where a (layer, head) keeps the same number of
// entries but not the same ones, the entries kept on one side only are paired in score order and
// each pair must score within `tol` of each other in the reference (|a - b| <= tol * max(1, |a|,
// |b|)). Why: the reference ranks exact ties by position, but two rows of one float projection
// may round differently on a CPU whose BLAS kernels treat the rows of a block differently
// (OpenBLAS's Zen kernels: equal tokens at layer 0 then differ in the last bit), so an exact tie
// of the reference is a coin toss in float. `scores(l, h)` gives the reference's score of every
// position. Returns how many (layer, head) evicted something; `swaps` counts the accepted pairs.
inline int expect_same_kept_up_to_ties(const EvictionReport& got, const reference::KeptSets& want, int prompt_len,
                                       const std::function<std::vector<double>(int l, int h)>& scores, double tol,
                                       const std::string& what, int* swaps = nullptr) {
  int evicted = 0;
  EXPECT_EQ(got.layers.size(), want.size()) << what;
  for (size_t l = 0; l < want.size() && l < got.layers.size(); ++l)
    for (size_t h = 0; h < want[l].size(); ++h) {
      const std::vector<int32_t>& g = got.layers[l][h].kept_positions;
      const std::vector<int32_t> w(want[l][h].begin(), want[l][h].end());
      evicted += static_cast<int>(w.size()) < prompt_len;
      if (g == w) continue;
      if (g.size() != w.size()) {
        ADD_FAILURE() << what << ": layer " << l << " head " << h << " keeps " << g.size() << " entries, the reference " << w.size();
        continue;
      }
      std::vector<int32_t> only_got, only_want;
      std::set_difference(g.begin(), g.end(), w.begin(), w.end(), std::back_inserter(only_got));
      std::set_difference(w.begin(), w.end(), g.begin(), g.end(), std::back_inserter(only_want));
      const std::vector<double> sc = scores(static_cast<int>(l), static_cast<int>(h));
      auto by_score = [&](int32_t a, int32_t b) { return sc[static_cast<size_t>(a)] > sc[static_cast<size_t>(b)]; };
      std::sort(only_got.begin(), only_got.end(), by_score);
      std::sort(only_want.begin(), only_want.end(), by_score);
      for (size_t i = 0; i < only_got.size(); ++i) {
        const double a = sc[static_cast<size_t>(only_got[i])], b = sc[static_cast<size_t>(only_want[i])];
        EXPECT_LE(std::fabs(a - b), tol * std::max({1.0, std::fabs(a), std::fabs(b)}))
            << what << ": layer " << l << " head " << h << " kept " << only_got[i] << " (score " << a << ") instead of "
            << only_want[i] << " (score " << b << ")";
      }
      if (swaps) *swaps += static_cast<int>(only_got.size());
    }
  return evicted;
}

}  // namespace kvevict::test
