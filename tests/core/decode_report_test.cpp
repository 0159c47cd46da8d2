// The report after every decode step (EvictionEngine::State::report_head): each head's kept
// positions, sorted, are exactly the cache's, whether the head was rebuilt (an edit renewed its
// stamp) or extended by the entries appended since it was last reported (KVCache::edit_stamp).
// On stories260K, for policies that evict at every step, every few steps, by a threshold, in score
// order, or not at all between their triggers; StreamingLLM's re-assigned cache, whose own
// positions are cache indices, reports the original positions its true-positions run keeps (its
// kept set is positional, the same in both modes).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

using Reports = std::vector<std::vector<std::vector<int32_t>>>;  // per step, [layer * heads + head]

class DecodeReport : public test::StoriesPromptTest {
 protected:
  // Decodes `steps` greedy tokens; after each call checks the report against the cache (where its
  // positions are the original ones) and returns the reported positions per step.
  static Reports decode(const std::string& name, const std::map<std::string, std::string>& params, int steps,
                        int64_t* edits_while_decoding = nullptr) {
    const ModelConfig& c = model_->config;
    const auto policy = load_policy(name, params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, c, {Budget::parse("50%"), 0});
    EXPECT_TRUE(engine.observes_decode()) << name << " evicts while decoding";
    Reports out;
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
    int64_t edits = 0;
    std::vector<int> lengths;
    for (int step = 0; step <= steps; ++step) {
      if (step > 0) {
        const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
        logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
      }
      const KVCache& cache = decoder->cache();
      const EvictionReport& r = engine.report();
      out.emplace_back();
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < cache.n_stored_heads(); ++h) {
          const std::vector<int32_t>& reported = r.layers[l][h].kept_positions;
          EXPECT_EQ(r.layers[l][h].kept, cache.length(l, h));
          EXPECT_TRUE(std::is_sorted(reported.begin(), reported.end())) << name << " step " << step;
          if (!cache.positions_reassigned(l, h)) {
            std::vector<int32_t> expected(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h));
            std::sort(expected.begin(), expected.end());
            EXPECT_EQ(reported, expected) << name << " step " << step << " layer " << l << " head " << h;
          }
          out.back().push_back(reported);
          const size_t slot = static_cast<size_t>(l) * cache.n_stored_heads() + h;
          if (step > 0 && lengths[slot] + 1 != cache.length(l, h)) ++edits;
          if (lengths.size() <= slot) lengths.resize(slot + 1);
          lengths[slot] = cache.length(l, h);
        }
    }
    if (edits_while_decoding) *edits_while_decoding = edits;
    return out;
  }
};

TEST_F(DecodeReport, EveryStepsReportHoldsTheCachesPositions) {
  const int steps = 40;  // CAKE evicts once a layer holds its budget and its window
  struct Case {
    const char* policy;
    std::map<std::string, std::string> params;
  };
  const std::vector<Case> cases = {
      {"h2o", {}},                                                    // one eviction per head per step
      {"tova", {}},                                                   // layer-shared
      {"streamingllm", {{"position_mode", "true_positions"}}},
      {"cake", {}},                                                   // score-ordered heads
      {"decoding", {{"compression_interval", "4"}}},                  // steps between triggers append only
      {"dms", {{"sliding_window_size", "8"}, {"decoding", "true"}}},  // threshold steps
  };
  for (const Case& k : cases) {
    int64_t edits = 0;
    decode(k.policy, k.params, steps, &edits);
    EXPECT_GT(edits, 0) << k.policy << ": some decode step edited the cache";
  }
}

TEST_F(DecodeReport, ReassignedPositionsReportTheOriginalOnes) {
  const int steps = 12;
  const Reports reassigned = decode("streamingllm", {{"position_mode", "reassign_in_cache"}}, steps);
  const Reports original = decode("streamingllm", {{"position_mode", "true_positions"}}, steps);
  EXPECT_EQ(reassigned, original);
}

}  // namespace
}  // namespace kvevict
