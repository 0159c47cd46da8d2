// evals/shard.h: the "I/N" spec (0-based, bounded, strict) and the round-robin partition of the
// planned samples (every sample in exactly one shard, balanced, the same on every call).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "evals/runner.h"
#include "evals/shard.h"

using namespace kvevict::evals;

TEST(ShardSpec, ParsesZeroBasedIndexAndCount) {
  struct Case {
    std::string text;
    int index, count;
    std::string canonical;
  };
  for (const Case& c : std::vector<Case>{{"0/1", 0, 1, "0/1"},
                                         {"1/2", 1, 2, "1/2"},
                                         {"3/4", 3, 4, "3/4"},
                                         {"9999/10000", 9999, 10000, "9999/10000"},
                                         {"01/002", 1, 2, "1/2"}}) {
    ShardSpec spec = parse_shard(c.text);
    EXPECT_EQ(spec.index, c.index) << c.text;
    EXPECT_EQ(spec.count, c.count) << c.text;
    EXPECT_EQ(spec.text(), c.canonical) << c.text;
  }
}

TEST(ShardSpec, OutOfRangeAndMalformedSpecsAreUsageErrorsNamingTheOptionAndRange) {
  struct Case {
    std::string text, expected;
  };
  const std::string form = "expected I/N: a 0-based shard index I in [0, N) and a shard count N in [1, 10000]";
  for (const Case& c : std::vector<Case>{
           {"2/2", "--shard '2/2': shard index 2 is out of range: I must be in [0, 2) (0-based, as SLURM_ARRAY_TASK_ID "
                   "with --array=0-1)"},
           {"5/3", "shard index 5 is out of range: I must be in [0, 3)"},
           {"0/0", "--shard '0/0': shard count 0 is out of range: N must be in [1, 10000]"},
           {"0/10001", "shard count 10001 is out of range: N must be in [1, 10000]"},
           {"1/99999999999999999999999", "shard count 99999999999999999999999 is out of range"},
           {"99999999999999999999/3", "shard index 99999999999999999999 is out of range: I must be in [0, 3)"},
           {"", form},
           {"1", form},
           {"/2", form},
           {"1/", form},
           {"a/2", form},
           {"-1/2", form},
           {"+1/2", form},
           {"1/-2", form},
           {" 1/2", form},
           {"1/2 ", form},
           {"1/2/3", form},
           {"1.0/2", form},
           {"1/0x10", form},
       }) {
    try {
      parse_shard(c.text);
      ADD_FAILURE() << "'" << c.text << "' was accepted";
    } catch (const kvevict::UsageError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("--shard '" + c.text + "': ", 0), 0u) << message;
      EXPECT_NE(message.find(c.expected), std::string::npos) << message;
      EXPECT_EQ(e.exit_code(), 2);
    }
  }
  // The option name is the caller's (merge names the database and run whose shard text is bad).
  try {
    parse_shard("3/2", "a.db: run #4: shard");
    ADD_FAILURE();
  } catch (const kvevict::UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("a.db: run #4: shard '3/2': shard index 3", 0), 0u) << e.what();
  }
}

TEST(ShardPartition, EverySampleIsInExactlyOneShardAndShardsAreBalanced) {
  for (int total = 0; total <= 23; ++total) {
    std::vector<Sample> planned(total);
    for (int i = 0; i < total; ++i) planned[i].key = std::string("s").append(std::to_string(i));
    for (int count = 1; count <= 9; ++count) {
      std::map<std::string, int> seen;
      size_t smallest = planned.size(), largest = 0;
      for (int index = 0; index < count; ++index) {
        const ShardSpec shard{index, count};
        const std::vector<Sample> part = shard_samples(planned, shard);
        smallest = std::min(smallest, part.size());
        largest = std::max(largest, part.size());
        for (size_t j = 1; j < part.size(); ++j) {  // planned order kept
          EXPECT_LT(std::stoi(part[j - 1].key.substr(1)), std::stoi(part[j].key.substr(1)));
        }
        for (const Sample& sample : part) ++seen[sample.key];
        // Deterministic: the same shard again is the same list.
        std::vector<std::string> again;
        for (const Sample& sample : shard_samples(planned, shard)) again.push_back(sample.key);
        ASSERT_EQ(again.size(), part.size());
        for (size_t j = 0; j < part.size(); ++j) EXPECT_EQ(again[j], part[j].key);
      }
      ASSERT_EQ(seen.size(), planned.size()) << total << " samples, " << count << " shards";
      for (const auto& [key, times] : seen) EXPECT_EQ(times, 1) << key;
      EXPECT_LE(largest - smallest, 1u) << total << " samples, " << count << " shards";
      if (count > total) {
        EXPECT_EQ(smallest, 0u);  // more shards than samples: some are empty
      }
    }
  }
}

TEST(ShardPartition, PlannedSamplesOfAConfigSplitTheSameWayEveryTime) {
  const char* yaml =
      "model: \"fake:\"\n"
      "seed: 3\n"
      "tasks:\n"
      "  passkey: {lengths: [60, 120], samples: 3}\n"
      "  needle: {lengths: [100, 200], depths: [0, 50, 100]}\n"
      "policies: [alpha]\n"
      "budgets: [full]\n";
  EvalConfig config = parse_eval_config(yaml, "c.yaml");
  FakeRunner first("fake:"), second("fake:");
  const std::vector<Sample> a = plan_samples(config, first), b = plan_samples(config, second);
  ASSERT_EQ(a.size(), 12u);
  std::set<std::string> union_keys;
  for (int index = 0; index < 5; ++index) {
    auto part_a = shard_samples(a, {index, 5}), part_b = shard_samples(b, {index, 5});
    ASSERT_EQ(part_a.size(), part_b.size());
    for (size_t j = 0; j < part_a.size(); ++j) {
      EXPECT_EQ(part_a[j].task + "/" + part_a[j].key, part_b[j].task + "/" + part_b[j].key);
      EXPECT_TRUE(union_keys.insert(part_a[j].task + "/" + part_a[j].key).second);
    }
  }
  EXPECT_EQ(union_keys.size(), a.size());
}
