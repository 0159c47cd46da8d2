// The `observe:` keys `causal` and `same_index_head` (PolicyObserve) and NACL's spec §8 parameters
// as they reach the policy description: proxy_causal, gqa_head_map, keep_proxy, decode_interval.
// What the engine then keeps is tested on real attention in tests/core/nacl_options_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

std::string usage_error(const std::string& text) {
  return dsl::test::policy_usage_error("o.yaml", text);
}

TEST(ObserveSettings, DefaultsAndExpressions) {
  const std::string head = "name: o\nabout: x\nparams:\n  c: {bool: false}\n";
  const std::string score = "score: |\n  score[t] = sum(h, q: A[h, q, t])\n";
  const auto plain = dsl::compile_policy_text("o.yaml", head + "observe: {window: 4}\n" + score);
  EXPECT_TRUE(plain.desc.observe.causal);
  EXPECT_FALSE(plain.desc.observe.same_index_head);
  const auto set = dsl::compile_policy_text("o.yaml", head + "observe: {window: 4, causal: c, same_index_head: not c}\n" + score);
  EXPECT_FALSE(set.desc.observe.causal);
  EXPECT_TRUE(set.desc.observe.same_index_head);
  EXPECT_TRUE(dsl::compile_policy_text("o.yaml", head + "observe: {window: 4, causal: c}\n" + score, {{"c", "true"}})
                  .desc.observe.causal);
}

TEST(ObserveSettings, ErrorsNameTheKey) {
  const std::string score = "score: |\n  score[t] = sum(h, q: A[h, q, t])\n";
  const std::string e1 = usage_error("name: o\nabout: x\nobserve: {window: 4, causal: 1}\n" + score);
  EXPECT_NE(e1.find("o.yaml:3:30: error: expected a boolean"), std::string::npos) << e1;
  const std::string e2 = usage_error("name: o\nabout: x\nobserve: {window: 4, casual: true}\n" + score);
  EXPECT_NE(e2.find("unknown key 'casual' in the 'observe' section (allowed: causal, query_rotation, query_stats_from, replay, rope_future, same_index_head, scaled, segment, window, window_after_token)"),
            std::string::npos) << e2;
}

TEST(ObserveSettings, NaclParametersReachTheDescription) {
  const auto def = load_policy("nacl");
  EXPECT_FALSE(def->description().observe.causal) << "official code: non-causal proxy scoring (spec §8)";
  EXPECT_FALSE(def->description().observe.same_index_head);
  EXPECT_EQ(def->description().run.decode_every, 0);
  EXPECT_EQ(def->protect_for(100000).recent, 1000 - 256) << "protected_tail: the code's recent span";
  EXPECT_TRUE(load_policy("nacl", {{"proxy_causal", "true"}})->description().observe.causal);
  EXPECT_TRUE(load_policy("nacl", {{"gqa_head_map", "code_compat"}})->description().observe.same_index_head);
  EXPECT_EQ(load_policy("nacl", {{"decode_interval", "8"}})->description().run.decode_every, 8);
  // keep_proxy = all: the protected tail covers the proxy span P when that is longer.
  const auto all = load_policy("nacl", {{"keep_proxy", "all"}});
  EXPECT_EQ(all->window_for(100000), 1000);
  EXPECT_EQ(all->protect_for(100000).recent, 1000);
  EXPECT_EQ(all->protect_for(2000).recent, 20);
  const auto old = load_policy("nacl", {{"keep_proxy", "all"}, {"budget_split", "code_pre_8eb45a1"}});
  EXPECT_EQ(old->protect_for(10000).recent, 1800);
  EXPECT_EQ(old->protect_for(10000).first, 50);
  EXPECT_THROW(load_policy("nacl", {{"decode_interval", "-1"}}), UsageError);
  EXPECT_THROW(load_policy("nacl", {{"gqa_head_map", "kv"}}), UsageError);
}

}  // namespace
}  // namespace kvevict
