// The observe keys of the query signals (query_stats_from, query_rotation, rope_future,
// window_after_token; core/engine/query_signals.h) as they reach the policy description, and the
// errors at their keys. The golden cases 31_query_settings and 32_query_signal_combinations hold
// the full messages; the engine's use is tested in tests/core/query_signal_policies_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

std::string usage_error(const std::string& text) {
  return dsl::test::policy_usage_error("q.yaml", text);
}

const std::string kMeanScore = "score: |\n  score[t] = sum(h, d: Q_mean[h, d] * K[d, t])\n";

TEST(QuerySettings, DefaultsAndExpressions) {
  const auto plain = dsl::compile_policy_text("q.yaml", "name: q\nabout: x\n" + kMeanScore);
  EXPECT_EQ(plain.desc.observe.query_stats_from, 0);
  EXPECT_EQ(plain.desc.observe.query_rotation, QueryRotation::None);
  EXPECT_EQ(plain.desc.observe.rope_future, 512);
  EXPECT_EQ(plain.desc.observe.window_after_token, -1);
  EXPECT_TRUE(plain.desc.needs(TensorSignal::QueryMean));
  const std::string head = "name: q\nabout: x\nparams:\n  n: {int: 4}\n  r: {enum: [none, future_mean], default: future_mean}\n";
  const auto set = dsl::compile_policy_text(
      "q.yaml", head + "observe: {query_stats_from: n, query_rotation: r, rope_future: 2 * n}\n" + kMeanScore, {{"n", "6"}});
  EXPECT_EQ(set.desc.observe.query_stats_from, 6);
  EXPECT_EQ(set.desc.observe.query_rotation, QueryRotation::FutureMean);
  EXPECT_EQ(set.desc.observe.rope_future, 12);
  const auto finch = load_policy("finch", {{"delimiter", "7"}});
  EXPECT_EQ(finch->description().observe.window_after_token, 7);
  EXPECT_TRUE(finch->description().run.reassign_positions);
  const auto ea = load_policy("expected_attention");
  EXPECT_EQ(ea->description().observe.query_stats_from, 4);
  EXPECT_EQ(ea->description().observe.query_rotation, QueryRotation::FutureMean);
  EXPECT_EQ(ea->description().observe.rope_future, 512);
  EXPECT_EQ(ea->description().protect.first, 4);
}

TEST(QuerySettings, ErrorsNameTheKey) {
  // A statistics key no program reads would be ignored.
  const std::string e1 = usage_error("name: q\nabout: x\nobserve: {window: 2, query_stats_from: 3}\nscore: |\n  score[t] = sum(h, q: A[h, q, t])\n");
  EXPECT_NE(e1.find("q.yaml:3:40: error: 'query_stats_from' is read only by Q_mean and Q_cov; no program reads them"), std::string::npos) << e1;
  const std::string e2 = usage_error("name: q\nabout: x\nobserve: {query_rotation: future}\n" + kMeanScore);
  EXPECT_NE(e2.find("q.yaml:3:27: error: 'query_rotation' must be one of none, future_mean"), std::string::npos) << e2;
  // With window_after_token, observe.window is the window of a prompt without the delimiter.
  EXPECT_EQ(dsl::compile_policy_text("q.yaml", "name: q\nabout: x\nobserve: {window: 3, window_after_token: 5}\nscore: |\n"
                                                "  score[t] = sum(h, q: A[h, q, t])\n").desc.window, 3);
  const std::string e4 = usage_error("name: q\nabout: x\nobserve: {window_after_token: 5, segment: 8}\nscore: |\n  score[t] = sum(h, q: A[h, q, t])\n");
  EXPECT_NE(e4.find("'window_after_token' cannot be combined with observe.segment"), std::string::npos) << e4;
  const std::string e5 = usage_error(
      "name: q\nabout: x\nobserve: {window: 2}\nrun: {decode_every: 1, reassign_positions: true}\nscore: |\n"
      "  score[t] = sum(h, q, d: Q_pre[h, q, d] * K_pre[d, t])\n");
  EXPECT_NE(e5.find("q.yaml:4:44: error: Q_pre rotates window queries back by their original positions"), std::string::npos) << e5;
}

}  // namespace
}  // namespace kvevict
