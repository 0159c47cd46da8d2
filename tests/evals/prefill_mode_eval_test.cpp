// An eval config's `prefill: auto | shared | per_run` (evals/config.h): read once into the enum
// (ModeNames names), hashed only when written, auto resolved by the runner's device, and the
// RESOLVED mode recorded per run (runs.prefill, schema 7; the leaderboard's JSON, CSV and titles,
// the report's provenance), never mixed (skip, --resume, merge) and honoured by replay. The fake
// model counts a prefill per evicting run in per_run, as the real runner does, so the sweep's
// accounting is tested here without a model; prefill_mode_stories_test.cpp runs the real one.
#include <gtest/gtest.h>

#include <filesystem>

#include "evals/config.h"
#include "evals/leaderboard.h"
#include "evals/leaderboard_stats.h"
#include "evals/replay.h"
#include "evals/report.h"
#include "evals/results_merge.h"
#include "evals/results_store.h"
#include "evals/sample_runner.h"
#include "fake_run_helpers.h"
#include "temp_db.h"

using namespace kvevict;
using namespace kvevict::evals;
using kvevict::evals::test::TempDb;

namespace {

using namespace kvevict::evals::test;

EvalConfig parse(const std::string& extra, const LoadConfigOptions& options = {}) { return parse_golden(extra, options); }

// A run of `config` as an earlier process (or a machine whose auto resolved otherwise) left it,
// recorded with the prefill mode `prefill`.
int64_t plant_run(const EvalConfig& config, const std::string& db, const std::string& prefill,
                  const std::string& status) {
  RunRecord run = fake_run_record(config);
  run.prefill = prefill;
  return kvevict::evals::test::plant_run(db, run, status);
}

// The fake, reporting its run prefills when replay_result (which owns it) is done with it.
class CountingRunner : public FakeRunner {
 public:
  CountingRunner(const EvalConfig& config, int64_t& out) : FakeRunner(config.model, config.prefill), out_(out) {}
  ~CountingRunner() override { out_ = run_prefill_count(); }

 private:
  int64_t& out_;
};

}  // namespace

TEST(PrefillModeConfig, TheThreeValuesAreReadIntoTheEnumAndHashedOnlyWhenWritten) {
  const EvalConfig absent = parse("");
  EXPECT_EQ(absent.prefill, PrefillMode::Auto);
  EXPECT_EQ(absent.resolved_yaml.find("\nprefill:"), std::string::npos) << absent.resolved_yaml;
  EXPECT_EQ(absent.hash, kGoldenHash) << absent.resolved_yaml;

  std::set<std::string> hashes = {absent.hash};
  for (const auto& [text, mode] : {std::pair{"auto", PrefillMode::Auto}, std::pair{"shared", PrefillMode::Shared},
                                   std::pair{"per_run", PrefillMode::PerRun}}) {
    const EvalConfig written = parse(std::string("prefill: ") + text + "\n");
    EXPECT_EQ(written.prefill, mode) << text;
    EXPECT_NE(written.resolved_yaml.find(std::string("\nprefill: ") + text + "\n"), std::string::npos)
        << written.resolved_yaml;
    EXPECT_TRUE(hashes.insert(written.hash).second) << text;  // written, each value is another config
  }
  LoadConfigOptions options;
  options.overrides = {"prefill=per_run"};
  EXPECT_EQ(parse("", options).prefill, PrefillMode::PerRun);
  EXPECT_EQ(parse("", options).hash, parse("prefill: per_run\n").hash);
}

TEST(PrefillModeConfig, AnythingButItsNamesIsRefusedAtItsLineAndColumn) {
  auto [message, code] = error_of([] { parse("prefill: perrun\n"); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("golden.yaml:8:10: error: prefill: 'perrun' is not one of auto|shared|per_run"),
            std::string::npos)
      << message;
  std::tie(message, code) = error_of([] { parse_eval_config("prefill: {a: 1}\n" + kGolden, "first.yaml"); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("first.yaml:1:10: error: prefill: expected a string"), std::string::npos) << message;
  LoadConfigOptions options;
  options.overrides = {"prefill=PER_RUN"};  // names are exact
  std::tie(message, code) = error_of([&] { parse("", options); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("--set prefill: error: prefill: 'PER_RUN' is not one of auto|shared|per_run"),
            std::string::npos)
      << message;
}

TEST(PrefillModeConfig, AutoResolvesByTheDeviceAndTheOthersAreKept) {
  EXPECT_EQ(resolve_prefill_mode(PrefillMode::Auto, true), PrefillMode::PerRun);
  EXPECT_EQ(resolve_prefill_mode(PrefillMode::Auto, false), PrefillMode::Shared);
  for (bool cuda : {false, true}) {
    EXPECT_EQ(resolve_prefill_mode(PrefillMode::Shared, cuda), PrefillMode::Shared);
    EXPECT_EQ(resolve_prefill_mode(PrefillMode::PerRun, cuda), PrefillMode::PerRun);
  }
  // The fake model runs on no GPU: auto is shared there; the factory passes the config's mode.
  EXPECT_EQ(make_sample_runner(parse(""))->prefill_mode(), PrefillMode::Shared);
  EXPECT_EQ(make_sample_runner(parse("prefill: auto\n"))->prefill_mode(), PrefillMode::Shared);
  EXPECT_EQ(make_sample_runner(parse("prefill: per_run\n"))->prefill_mode(), PrefillMode::PerRun);
}

TEST(PrefillModeEval, PerRunPrefillsOncePerEvictingRunAndSharedDoesNot) {
  const std::string grid = "tasks:\n  passkey: {lengths: [60], samples: 3}\npolicies: [alpha, beta]\n"
                           "budgets: [\"20%\", \"8\", full]\nmodel: \"fake:\"\n";
  TempDb per_db("prefill_mode_count_per"), shared_db("prefill_mode_count_shared");
  const EvalSummary per_run = run_fake(parse_eval_config(grid + "prefill: per_run\n", "count.yaml"), per_db.path);
  EXPECT_EQ(per_run.samples, 3);
  EXPECT_EQ(per_run.prefills, 3);  // the shared one still serves the full cache
  EXPECT_EQ(per_run.run_prefills, 3 * 2 * 2);  // samples x policies x evicting budgets; full prefills nothing
  const EvalSummary shared = run_fake(parse_eval_config(grid, "count.yaml"), shared_db.path);
  EXPECT_EQ(shared.prefills, 3);
  EXPECT_EQ(shared.run_prefills, 0);
}

TEST(PrefillModeEval, EachRunRecordsItsResolvedModeWhereResultsAreShown) {
  TempDb db("prefill_mode_record");
  const int64_t shared_id = run_fake(parse(""), db.path).run_id;
  const int64_t auto_id = run_fake(parse("prefill: auto\n"), db.path).run_id;
  const int64_t per_id = run_fake(parse("prefill: per_run\n"), db.path).run_id;
  ResultsStore store(db.path);
  EXPECT_EQ(store.run(shared_id)->prefill, "shared");
  EXPECT_EQ(store.run(auto_id)->prefill, "shared");  // resolved: the fake has no GPU; never "auto"
  EXPECT_EQ(store.run(per_id)->prefill, "per_run");

  const auto rows = store.leaderboard("", "", per_id);
  ASSERT_FALSE(rows.empty());
  for (const AggregateRow& row : rows) EXPECT_EQ(row.prefill, "per_run");
  const auto groups = build_leaderboard(rows, store_sample_scores(store));
  for (const auto& record : nlohmann::json::parse(render_leaderboard(groups, LeaderboardFormat::Json)))
    EXPECT_EQ(record["prefill"], "per_run") << record.dump();
  const std::string csv = render_leaderboard(groups, LeaderboardFormat::Csv);
  EXPECT_NE(csv.find(",scoring,prefill_attention,prefill,device_kv_bytes\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",own,per_run,"), std::string::npos) << csv;
  EXPECT_NE(render_leaderboard(groups, LeaderboardFormat::Table).find("; prefill per_run)"), std::string::npos);
  // Shared runs' titles stay as they were before the key.
  const auto shared_groups = build_leaderboard(store.leaderboard("", "", shared_id), store_sample_scores(store));
  EXPECT_EQ(render_leaderboard(shared_groups, LeaderboardFormat::Table).find("prefill "), std::string::npos);

  const std::string out = db.path + ".report";
  std::filesystem::remove_all(out);
  write_report(store, out);
  const std::string html = file_text(out + "/index.html");
  EXPECT_NE(html.find("<th>prefill attention</th><th>prefill</th>"), std::string::npos);
  EXPECT_NE(html.find("<td>own</td><td>per_run</td></tr>"), std::string::npos) << html.substr(0, 4000);
  std::filesystem::remove_all(out);
}

// auto resolves by device, so one config hash can have run shared (a CPU) and per_run (a GPU):
// such runs are not one run. Planted runs stand for the other machine; the control is taken.
TEST(PrefillModeEval, AFinishedOrUnfinishedRunOfAnotherModeIsNotTaken) {
  const EvalConfig config = parse("");  // auto: shared on the fake
  TempDb failed("prefill_mode_resume");
  const int64_t planted_failed = plant_run(config, failed.path, "per_run", "failed");
  std::vector<std::string> notes;
  const int64_t resumed = run_fake(config, failed.path, "", &notes, true).run_id;
  EXPECT_NE(resumed, planted_failed);
  EXPECT_TRUE(any_contains(notes, "run #" + std::to_string(planted_failed) +
                                      " ran the per_run prefill, this one runs shared; starting a new run"));

  TempDb finished("prefill_mode_done");
  const int64_t planted_finished = plant_run(config, finished.path, "per_run", "finished");
  notes.clear();
  EXPECT_NE(run_fake(config, finished.path, "", &notes).run_id, planted_finished);  // not skipped as done
  EXPECT_TRUE(any_contains(notes, "run #" + std::to_string(planted_finished) +
                                      " of this config ran the per_run prefill, this one runs shared; running again"));

  TempDb control("prefill_mode_control");
  const int64_t same = plant_run(config, control.path, "shared", "failed");
  EXPECT_EQ(run_fake(config, control.path, "", nullptr, true).run_id, same);
}

TEST(PrefillModeMerge, ShardsOfDifferentModesAreRefused) {
  TempDb s0("prefill_mode_merge0"), s1("prefill_mode_merge1"), out("prefill_mode_merge_out");
  const EvalConfig config = parse("");
  run_fake(config, s0.path, "0/2");
  run_fake(config, s1.path, "1/2");
  sql(s1.path, "UPDATE runs SET prefill = 'per_run'");
  auto [message, code] = error_of([&] { merge_results(out.path, {s0.path, s1.path}); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find(s1.path + " run #1 ran the 'per_run' prefill but " + s0.path +
                         " run #1 'shared': merge joins the shards of one config and one model and one prefill mode"),
            std::string::npos)
      << message;
  EXPECT_FALSE(std::filesystem::exists(out.path));
  sql(s1.path, "UPDATE runs SET prefill = 'shared'");
  EXPECT_EQ(merge_results(out.path, {s0.path, s1.path}).shards, 2);
}

TEST(PrefillModeSchema, AVersionSixDatabaseMigratesItsRunsAsShared) {
  TempDb db("prefill_mode_v6");
  test::write_old_database(db.path, 6);
  {  // read-only (replay) reads it unmigrated
    ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
    EXPECT_EQ(store.schema_version(), 6);
    EXPECT_EQ(store.run(1)->prefill, "shared");
    EXPECT_EQ(store.leaderboard().at(0).prefill, "shared");
  }
  ResultsStore store(db.path);
  EXPECT_EQ(store.schema_version(), ResultsStore::kSchemaVersion);
  EXPECT_EQ(store.run(1)->prefill, "shared");  // before version 7 every run evicted one shared prefill
  EXPECT_EQ(store.run(1)->prefill_attention, "own");
  EXPECT_EQ(store.leaderboard().at(0).prefill, "shared");
  EXPECT_EQ(store.results(1).size(), 2u);
}

// Replay takes the run's recorded (resolved) mode, whatever the stored config says (auto here), and
// refuses a mode it cannot run instead of guessing.
TEST(PrefillModeReplay, AResultReplaysWithItsRunsRecordedMode) {
  TempDb db("prefill_mode_replay");
  const EvalConfig config = parse("");
  const int64_t run = run_fake(config, db.path).run_id;
  sql(db.path, "UPDATE runs SET prefill = 'per_run'");  // as a GPU would have recorded auto
  int64_t evicting = 0;
  for (const SampleResult& row : ResultsStore(db.path).results(run))
    if (row.budget != "full") evicting = row.id;
  ASSERT_GT(evicting, 0);

  PrefillMode asked = PrefillMode::Auto;
  int64_t run_prefills = -1;
  RunnerFactory factory = [&](const EvalConfig& c) -> std::unique_ptr<SampleRunner> {
    asked = c.prefill;
    return std::make_unique<CountingRunner>(c, run_prefills);
  };
  {
    ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
    const ReplayReport report = replay_result(store, evicting, factory);
    EXPECT_TRUE(report.equal());
    EXPECT_EQ(asked, PrefillMode::PerRun);
    EXPECT_EQ(run_prefills, 1);  // the replayed run prefilled by itself
  }
  sql(db.path, "UPDATE runs SET prefill = 'auto'");
  ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
  auto [message, code] = error_of([&] { replay_result(store, evicting, factory); });
  EXPECT_EQ(code, 2);
  EXPECT_NE(message.find("records the prefill mode 'auto' (expected shared or per_run)"), std::string::npos)
      << message;
}
