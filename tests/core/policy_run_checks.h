#pragma once
// What the policy-file tests on stories260K share: one prefill of a prompt under a named policy
// (F32 cache, one thread), and the comparison of its kept sets with a reference's.
#include <gtest/gtest.h>

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

}  // namespace kvevict::test
