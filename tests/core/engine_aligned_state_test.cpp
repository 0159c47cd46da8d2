// The engine's per-entry state (prefill scores, accumulated attention) stays aligned with the cache
// while the decoder appends decode tokens and the policies evict at decode time (issue 13: the
// prefill scores kept their prefill length, and the first decode eviction indexed them one past
// the end: an abort under _GLIBCXX_ASSERTIONS, a silent out-of-bounds read in Release). The check
// is on lengths, so it fails in every build type, not only under a sanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "hand_policies.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

class EngineAlignedState : public test::StoriesPromptTest {};

int greedy(const std::vector<float>& logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Every length the engine reports for (layer, stored head) equals that head's cache length.
// (A fatal failure, checked by the caller.)
void expect_aligned(const EvictionEngine& engine, const KVCache& cache, const std::string& where) {
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h)
      for (const size_t n : engine.aligned_state_lengths(l, h))
        ASSERT_EQ(n, static_cast<size_t>(cache.length(l, h))) << where << ", layer " << l << " head " << h;
}

// Decodes kSteps greedy tokens after the prompt with `policy` at `budget`, checking alignment after
// every forward call; returns the number of decode-time evictions.
int decode_and_check(const Model& model, const std::vector<int>& prompt, const PolicyProgram& policy,
                     const std::string& budget, const std::string& where) {
  constexpr int kSteps = 30;
  auto decoder = make_cpu_decoder(model, {.threads = 1});
  EvictionEngine engine(policy, model.config, {Budget::parse(budget), 0});
  int next = greedy(decoder->forward(std::span<const int>(prompt), &engine));
  expect_aligned(engine, decoder->cache(), where + ", after prefill");
  for (int step = 1; step <= kSteps && !::testing::Test::HasFatalFailure(); ++step) {
    next = greedy(decoder->forward(std::span<const int>(&next, 1), &engine));
    expect_aligned(engine, decoder->cache(), where + ", decode step " + std::to_string(step));
  }
  EXPECT_EQ(engine.report().decode_steps, kSteps) << where;
  const int prefill_applications = engine.report().prefill_evicted ? (policy.description().run.cascading ? model.config.n_layers : 1) : 0;
  return engine.report().applications - prefill_applications;
}

TEST_F(EngineAlignedState, BuiltInPoliciesKeepPerEntryStateAlignedThroughDecode) {
  int decode_evictions = 0;
  for (const char* name : {"h2o", "tova", "streamingllm", "cake", "snapkv", "knorm"})
    for (const char* budget : {"full", "50%", "20"}) {
      const auto policy = load_policy(name);
      decode_evictions += decode_and_check(*model_, tokens_, *policy, budget, std::string(name) + " at " + budget);
      if (HasFatalFailure()) return;
    }
  EXPECT_GT(decode_evictions, 0);  // the decode triggers ran (h2o and tova evict every step over budget)
}

// Evictions every third step with slack: between two evictions the cache grows past the state the
// last eviction left, which is where the state used to fall behind.
TEST_F(EngineAlignedState, DecodeEvictionsEveryThirdStepKeepItAligned) {
  const test::HandPolicy h2o = test::h2o_policy(8, 3, 2);
  const test::HandPolicy current = test::current_attention_policy(8, 3, 2);
  int decode_evictions = 0;
  for (const test::HandPolicy* policy : {&h2o, &current})
    for (const char* budget : {"full", "40"}) {
      decode_evictions += decode_and_check(*model_, tokens_, *policy, budget, policy->desc.name + " at " + budget);
      if (HasFatalFailure()) return;
    }
  EXPECT_GT(decode_evictions, 0);
}

}  // namespace
}  // namespace kvevict
