// The leaderboard's statistics on a hand-made database, in every format.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "evals/leaderboard.h"
#include "evals/leaderboard_fixture.h"

using namespace kvevict::evals;

namespace {

std::vector<LeaderboardGroup> groups_of(kvevict::test::HandMadeDb& db, double threshold = kDefaultIsoThreshold) {
  ResultsStore store(db.path);
  return build_leaderboard(store.leaderboard(), store_sample_scores(store), threshold);
}

const LeaderboardRow& row_of(const LeaderboardGroup& group, const std::string& policy) {
  auto it = std::find_if(group.rows.begin(), group.rows.end(), [&](const LeaderboardRow& r) { return r.policy == policy; });
  EXPECT_NE(it, group.rows.end()) << policy;
  return *it;
}

}  // namespace

TEST(LeaderboardStats, CellsCarryNIntervalsAndThePairedDifferenceToFull) {
  kvevict::test::HandMadeDb db("lb_cells");
  auto groups = groups_of(db);
  ASSERT_EQ(groups.size(), 1u);
  const LeaderboardGroup& group = groups[0];
  EXPECT_EQ(group.budgets, (std::vector<std::string>{"25%", "50%", "75%", "full"}));
  const LeaderboardCell& snap25 = row_of(group, "snap").cells.at("25%");
  EXPECT_EQ(snap25.score.n, 8);
  EXPECT_DOUBLE_EQ(snap25.aggregate.score, 37.5);
  EXPECT_EQ(snap25.score.interval.method, IntervalMethod::Wilson);  // 3 of 8
  EXPECT_NEAR(snap25.score.interval.low, 13.684428582359742, 1e-9);
  EXPECT_NEAR(snap25.score.interval.high, 69.42576053973727, 1e-9);
  // score - full per sample: 0 on s0..s2, -100 on s3..s7. Bootstrap bounds from the Python reference
  // of tests/evals/stats_interval_test.cpp on {0, 0, 0, -100, -100, -100, -100, -100}.
  EXPECT_EQ(snap25.vs_full.n, 8);
  EXPECT_DOUBLE_EQ(snap25.vs_full.mean, -62.5);
  EXPECT_NEAR(snap25.vs_full.interval.low, -87.8125, 1e-9);
  EXPECT_NEAR(snap25.vs_full.interval.high, -25.0, 1e-9);
  EXPECT_TRUE(snap25.vs_full.significant());
  // A partial-score cell gets the bootstrap: {80, 100, ...} - 100 = {-20, 0, ...} -> [-17.5, -2.5].
  const LeaderboardCell& odd50 = row_of(group, "odd").cells.at("50%");
  EXPECT_EQ(odd50.score.interval.method, IntervalMethod::Bootstrap);
  EXPECT_NEAR(odd50.vs_full.interval.low, -17.5, 1e-9);
  EXPECT_NEAR(odd50.vs_full.interval.high, -2.5, 1e-9);
  // keep equals full everywhere: a zero difference, not significant.
  EXPECT_FALSE(row_of(group, "keep").cells.at("25%").vs_full.significant());
}

TEST(LeaderboardStats, MeanExcludesFullAndIsoQualityPerPolicy) {
  kvevict::test::HandMadeDb db("lb_iso");
  auto groups = groups_of(db);
  const LeaderboardGroup& group = groups[0];
  // snap: (37.5 + 87.5 + 100) / 3 = 75 (with full it would be 81.25).
  EXPECT_DOUBLE_EQ(compressed_mean(row_of(group, "snap"), LeaderboardMetric::Score), 75.0);
  // snap crosses 95 between (0.5, 87.5) and (0.75, 100): 0.5 + 7.5 / 12.5 * 0.25 = 0.65.
  EXPECT_EQ(row_of(group, "snap").iso.position, IsoPosition::Inside);
  EXPECT_NEAR(row_of(group, "snap").iso.kept_fraction, 0.65, 1e-12);
  EXPECT_EQ(row_of(group, "keep").iso.position, IsoPosition::BelowSmallest);
  EXPECT_EQ(row_of(group, "odd").iso.position, IsoPosition::AboveLargest);  // 90 < 95 at 75%
  // At threshold 0.9, odd meets 90 from 25% on.
  auto loose = groups_of(db, 0.9);
  EXPECT_EQ(row_of(loose[0], "odd").iso.position, IsoPosition::BelowSmallest);
}

TEST(LeaderboardStats, SortByMeanOrByIsoQuality) {
  kvevict::test::HandMadeDb db("lb_sort");
  auto groups = groups_of(db);
  auto names = [&](LeaderboardSort sort) {
    LeaderboardOptions options;
    options.sort = sort;
    std::vector<std::string> out;
    for (const auto* row : sorted_rows(groups[0], options)) out.push_back(row->policy);
    return out;
  };
  // Means: keep 100, odd (100 + 90 + 90) / 3 = 93.3, snap 75. Iso: keep < 25%, snap 65%, odd > 75%.
  EXPECT_EQ(names(LeaderboardSort::Mean), (std::vector<std::string>{"keep", "odd", "snap"}));
  EXPECT_EQ(names(LeaderboardSort::Iso), (std::vector<std::string>{"keep", "snap", "odd"}));
}

TEST(LeaderboardStats, EveryFormatShowsTheStatistics) {
  kvevict::test::HandMadeDb db("lb_formats");
  auto groups = groups_of(db);
  std::string table = render_leaderboard(groups, LeaderboardFormat::Table);
  EXPECT_NE(table.find("37.5 [13.7, 69.4]"), std::string::npos) << table;
  EXPECT_NE(table.find("65.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("< 25.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("> 75.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("* -62.5 [-87.8, -25.0]"), std::string::npos) << table;
  EXPECT_NE(table.find("full excluded"), std::string::npos) << table;
  EXPECT_NE(table.find("; scored by host)"), std::string::npos) << table;  // the run's scoring backend

  std::string md = render_leaderboard(groups, LeaderboardFormat::Markdown);
  EXPECT_NE(md.find("| policy | 25% | 50% | 75% | full | mean | iso@95% | n |"), std::string::npos) << md;
  EXPECT_NE(md.find("| snap | 37.5 [13.7, 69.4] | 87.5 ["), std::string::npos) << md;

  auto json = nlohmann::json::parse(render_leaderboard(groups, LeaderboardFormat::Json));
  ASSERT_EQ(json.size(), 12u);
  bool found = false;
  for (const auto& record : json) {
    EXPECT_TRUE(record["score_low"].is_number()) << record.dump();
    EXPECT_TRUE(record["n"].is_number_integer());
    if (record["policy"] == "snap" && record["budget"] == "25%") {
      found = true;
      EXPECT_EQ(record["n"].get<int>(), 8);
      EXPECT_EQ(record["interval"], "wilson");
      EXPECT_NEAR(record["score_low"].get<double>(), 13.684428582359742, 1e-9);
      EXPECT_DOUBLE_EQ(record["diff_full"]["mean"].get<double>(), -62.5);
      EXPECT_TRUE(record["diff_full"]["significant"].get<bool>());
      EXPECT_DOUBLE_EQ(record["policy_mean"].get<double>(), 75.0);
      EXPECT_NEAR(record["iso"]["kept_fraction"].get<double>(), 0.65, 1e-12);
      EXPECT_EQ(record["iso"]["position"], "inside");
      EXPECT_EQ(record["scoring"], "host");
    }
  }
  EXPECT_TRUE(found);

  std::string csv = render_leaderboard(groups, LeaderboardFormat::Csv);
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = csv.find('\n', at)) != std::string::npos; at = end + 1) lines.push_back(csv.substr(at, end - at));
  ASSERT_EQ(lines.size(), 13u);
  const auto commas = std::count(lines[0].begin(), lines[0].end(), ',');
  for (const auto& line : lines) EXPECT_EQ(std::count(line.begin(), line.end(), ','), commas) << line;
  EXPECT_NE(csv.find("snap,25%,37.5000,8,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",13.6844,69.4258,wilson,-62.5000,-87.8125,-25.0000,8,75.0000,0.650000,inside,host"), std::string::npos)
      << csv;
}

TEST(LeaderboardStats, AggregatesAloneGiveNWithoutIntervals) {
  kvevict::test::HandMadeDb db("lb_plain");
  ResultsStore store(db.path);
  std::string table = render_leaderboard(store.leaderboard(), LeaderboardFormat::Table);
  EXPECT_NE(table.find("37.5   87.5  100.0  100.0   75.0    65.0%  8"), std::string::npos) << table;
  EXPECT_EQ(table.find("[13.7"), std::string::npos) << table;
  EXPECT_EQ(table.find("difference to full"), std::string::npos) << table;
}

TEST(LeaderboardStats, BytesAreHumanReadable) {
  EXPECT_EQ(format_bytes(9395973), "8.96 MiB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(50.0 * 1024 * 1024), "50.0 MiB");
  EXPECT_EQ(format_bytes(123.0 * 1024 * 1024), "123 MiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
}
