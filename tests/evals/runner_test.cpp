// The sweep with the fake model: one prefill per sample, skip/force/resume, and the outputs
// (leaderboard formats, report files) built from what it stored.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "failing_runner.h"
#include "evals/leaderboard.h"
#include "evals/report.h"
#include "evals/runner.h"
#include "markup_check.h"

using namespace kvevict::evals;
using kvevict::evals::test::FailingRunner;

namespace {

const char* kConfig =
    "name: sweep\n"
    "model: \"fake:\"\n"
    "seed: 5\n"
    "tasks:\n"
    "  passkey: {lengths: [60, 120], samples: 2}\n"
    "  needle: {lengths: [100, 200], depths: [0, 50, 100]}\n"
    "policies: [alpha, beta, gamma]\n"
    "budgets: [\"20%\", \"40\", full]\n";

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string db() const { return (path / "kvevict.db").string(); }
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(Runner, PrefillsOncePerSampleNotPerPolicyAndBudget) {
  TempDir dir("runner_prefill");
  EvalConfig config = parse_eval_config(kConfig, "sweep.yaml");
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  EvalSummary summary = run_eval(config, runner, store, {});
  EXPECT_EQ(summary.samples, 4 + 6);
  EXPECT_EQ(summary.prefills, summary.samples);
  EXPECT_EQ(summary.results_total, summary.samples * 3 * 3);
  EXPECT_EQ(summary.results_written, summary.results_total);
  EXPECT_EQ(store.count_results(summary.run_id), summary.results_total);
  EXPECT_EQ(store.run(summary.run_id)->status, "finished");
  EXPECT_EQ(store.run(summary.run_id)->config_yaml, config.resolved_yaml);
  // Full budget keeps everything and the fake then always finds the answer.
  for (const auto& row : store.results(summary.run_id)) {
    if (row.budget == "full") {
      EXPECT_DOUBLE_EQ(row.score, 100.0) << row.sample_key;
      EXPECT_DOUBLE_EQ(row.kept_ratio, 1.0);
    } else {
      EXPECT_LT(row.kept_ratio, 1.0);
    }
  }
}

TEST(Runner, IdenticalFinishedRunIsSkippedUnlessForced) {
  TempDir dir("runner_skip");
  EvalConfig config = parse_eval_config(kConfig, "sweep.yaml");
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  EvalSummary first = run_eval(config, runner, store, {});
  std::vector<std::string> notes;
  EvalOptions options;
  options.note = [&](const std::string& text) { notes.push_back(text); };
  EvalSummary second = run_eval(config, runner, store, options);
  EXPECT_TRUE(second.skipped);
  EXPECT_EQ(second.run_id, first.run_id);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("skipping"), std::string::npos);
  options.force = true;
  EvalSummary forced = run_eval(config, runner, store, options);
  EXPECT_FALSE(forced.skipped);
  EXPECT_NE(forced.run_id, first.run_id);
  EXPECT_EQ(store.count_results(forced.run_id), first.results_total);
}

TEST(Runner, ResumeAfterACrashLosesAndDuplicatesNothing) {
  TempDir dir("runner_resume");
  EvalConfig config = parse_eval_config(kConfig, "sweep.yaml");
  ResultsStore store(dir.db());
  FailingRunner crashing(30);  // dies inside the 5th sample (7 runs per sample: the full cache once; 9 results)
  EXPECT_THROW(run_eval(config, crashing, store, {}), kvevict::RuntimeError);
  // The run is marked failed with the reason (it was left "running" with no reason before).
  auto run = store.find_run(config.hash, crashing.model_hash(), "failed");
  ASSERT_TRUE(run);
  EXPECT_FALSE(store.find_run(config.hash, crashing.model_hash(), "running"));
  EXPECT_NE(run->reason.find("simulated crash"), std::string::npos) << run->reason;
  EXPECT_EQ(store.count_results(run->id), 36);  // whole samples only

  FakeRunner runner("fake:");
  EvalOptions options;
  options.resume = true;
  EvalSummary resumed = run_eval(config, runner, store, options);
  EXPECT_TRUE(resumed.resumed);
  EXPECT_EQ(resumed.run_id, run->id);
  EXPECT_EQ(resumed.results_written, resumed.results_total - 36);
  EXPECT_EQ(resumed.prefills, resumed.samples - 4);  // finished samples are not prefilled again

  // Same rows as an uninterrupted run.
  ResultsStore clean_store((dir.path / "clean.db").string());
  FakeRunner clean_runner("fake:");
  EvalSummary clean = run_eval(config, clean_runner, clean_store, {});
  auto a = store.results(resumed.run_id), b = clean_store.results(clean.run_id);
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, double> scores;
  for (const auto& row : b) scores[ResultsStore::result_key(row.task, row.sample_key, row.policy, row.budget)] = row.score;
  for (const auto& row : a) {
    auto key = ResultsStore::result_key(row.task, row.sample_key, row.policy, row.budget);
    ASSERT_TRUE(scores.count(key)) << key;
    EXPECT_DOUBLE_EQ(scores[key], row.score);
  }
}

TEST(Runner, WithoutResumeAnUnfinishedRunIsLeftAndANewOneStarts) {
  TempDir dir("runner_noresume");
  EvalConfig config = parse_eval_config(kConfig, "sweep.yaml");
  ResultsStore store(dir.db());
  FailingRunner crashing(5);
  EXPECT_THROW(run_eval(config, crashing, store, {}), kvevict::RuntimeError);
  FakeRunner runner("fake:");
  std::vector<std::string> notes;
  EvalOptions options;
  options.note = [&](const std::string& text) { notes.push_back(text); };
  EvalSummary summary = run_eval(config, runner, store, options);
  EXPECT_FALSE(summary.resumed);
  EXPECT_EQ(summary.results_written, summary.results_total);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("--resume"), std::string::npos);
}

TEST(Runner, ScoresFollowTheSampleMetric) {
  Sample sample;
  sample.metric = "qa_f1";
  sample.references = {"Ann"};
  sample.first_line_only = true;
  RunOutcome outcome;
  outcome.prediction = "\nAnn\nBob and more";
  nlohmann::json extra;
  EXPECT_DOUBLE_EQ(score_outcome(sample, outcome, extra), 100.0);
  sample.first_line_only = false;
  EXPECT_NEAR(score_outcome(sample, outcome, extra), 100.0 * 2 * (1.0 / 4) / (1 + 1.0 / 4), 1e-9);
  Sample fidelity;
  fidelity.fidelity = true;
  outcome.top1_agreement = 0.75;
  outcome.kl = 0.2;
  EXPECT_DOUBLE_EQ(score_outcome(fidelity, outcome, extra), 75.0);
  EXPECT_DOUBLE_EQ(extra["kl"].get<double>(), 0.2);
}

TEST(Leaderboard, EveryFormat) {
  TempDir dir("leaderboard_formats");
  EvalConfig config = parse_eval_config(kConfig, "sweep.yaml");
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  run_eval(config, runner, store, {});
  auto rows = store.leaderboard();
  ASSERT_EQ(rows.size(), 2u * 3 * 3);

  auto json = nlohmann::json::parse(render_leaderboard(rows, LeaderboardFormat::Json));
  ASSERT_TRUE(json.is_array());
  ASSERT_EQ(json.size(), rows.size() + 3 * 3);  // and the pooled "all tasks" cells of 3 policies x 3 budgets
  size_t pooled = 0;
  for (const auto& record : json) pooled += record["task"] == "all tasks" ? 1 : 0;
  EXPECT_EQ(pooled, 9u);
  for (const auto& record : json) {
    for (const char* key : {"task", "policy", "budget", "score", "samples", "kv_bytes"}) {
      EXPECT_TRUE(record.contains(key)) << key;
    }
  }

  std::string csv = render_leaderboard(rows, LeaderboardFormat::Csv);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "model,task,policy,budget,score,samples,kv_bytes,kv_bytes_full,kept_ratio,ttft_ms,decode_tok_s,run_id,"
            "score_low,score_high,interval,diff_full,diff_full_low,diff_full_high,diff_full_n,policy_mean,"
            "iso_kept_fraction,iso_position,scoring,prefill_attention,prefill,device_kv_bytes");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(rows.size() + 9 + 1));  // + pooled cells

  std::string md = render_leaderboard(rows, LeaderboardFormat::Markdown);
  EXPECT_NE(md.find("| policy | 20% | 40 | full | mean | iso@95% | n |"), std::string::npos) << md;
  EXPECT_NE(md.find("|---|---:|"), std::string::npos);

  // Table: rows sorted best first by mean score over the compressed budgets (full excluded).
  std::string table = render_leaderboard(store.leaderboard("needle"), LeaderboardFormat::Table);
  std::map<std::string, double> mean;
  for (const auto& row : store.leaderboard("needle")) {
    if (row.budget != "full") mean[row.policy] += row.score / 2;
  }
  std::vector<std::pair<double, std::string>> expected;
  for (const auto& [policy, value] : mean) expected.push_back({-value, policy});
  std::sort(expected.begin(), expected.end());
  size_t previous = 0;
  for (const auto& [value, policy] : expected) {
    size_t at = table.find("\n" + policy + " ");
    ASSERT_NE(at, std::string::npos) << table;
    EXPECT_GE(at, previous) << table;
    previous = at;
  }
  EXPECT_NE(render_leaderboard(rows, LeaderboardFormat::Table, {LeaderboardMetric::KvBytes}).find("KiB"), std::string::npos);
}

TEST(Report, WritesValidSvgAndHtml) {
  TempDir dir("report_files");
  EvalConfig config = parse_eval_config(kConfig, "sweep.yaml");
  ResultsStore store(dir.db());
  FakeRunner runner("fake:");
  run_eval(config, runner, store, {});
  ReportFiles files = write_report(store, (dir.path / "report").string());
  std::string html = read_file(files.index);
  EXPECT_EQ(kvevict::test::check_markup(html, true), "");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // 3 score plots and 3 iso-quality bar charts (passkey, needle, all tasks pooled) + needle heatmaps
  // for 3 policies x the 2 compressed budgets (at full every cell scores 100: no heatmap); passkey
  // here has random depths, so no heatmap, and the pooled group has no depth grid.
  EXPECT_EQ(files.svgs.size(), 6u + 6u);
  for (const auto& svg : files.svgs) {
    std::string text = read_file(svg);
    EXPECT_EQ(kvevict::test::check_markup(text, false), "") << svg;
    EXPECT_EQ(text.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
    EXPECT_NE(html.find(std::filesystem::path(svg).filename().string()), std::string::npos);
  }
  // The checker itself rejects broken markup.
  EXPECT_NE(kvevict::test::check_markup("<svg><g></svg>", false), "");
  EXPECT_NE(kvevict::test::check_markup("<svg a=1></svg>", false), "");
  EXPECT_NE(kvevict::test::check_markup("<svg>&</svg>", false), "");
}
