// evals/results_merge.h with the fake model: N shards merged equal the unsharded run row for row,
// the merge is idempotent and completes an interrupted one, copies tables it does not know by name,
// and refuses (OUT untouched) inputs of other configs or models, missing, unfinished, conflicting
// or mixed-count shards.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "failing_runner.h"
#include "evals/results_merge.h"
#include "evals/results_store.h"
#include "evals/runner.h"
#include "evals/shard.h"
#include "temp_db.h"

using namespace kvevict::evals;
using kvevict::evals::test::FailingRunner;
using kvevict::evals::test::TempDb;

namespace {

EvalConfig config_for(int seed = 5, const std::string& model = "fake:") {
  const std::string yaml = "name: merge\nmodel: \"" + model + "\"\nseed: " + std::to_string(seed) +
                           "\ntasks:\n"
                           "  passkey: {lengths: [60, 120], samples: 2}\n"
                           "  needle: {lengths: [100, 200], depths: [0, 50, 100]}\n"
                           "policies: [alpha, beta]\n"
                           "budgets: [\"20%\", \"40\", full]\n";
  return parse_eval_config(yaml, "merge.yaml");
}

// Runs shard `spec` of `config` ("" = every sample) into `db`, as kvevict eval --shard does.
int64_t run_part(const EvalConfig& config, const std::string& db, const std::string& spec, FakeRunner* runner = nullptr) {
  FakeRunner fake(config.model);
  FakeRunner& use = runner ? *runner : fake;
  ResultsStore store(db);
  std::vector<Sample> samples = plan_samples(config, use);
  EvalOptions options;
  if (!spec.empty()) {
    samples = shard_samples(samples, parse_shard(spec));
    options.shard = spec;
  }
  options.samples = &samples;
  return run_eval(config, use, store, options).run_id;
}

std::string exact(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// Every stored column of a run's results, keyed by result key (the fake's timings are
// deterministic, so here even they must match).
std::map<std::string, std::string> rows_of(const std::string& db, int64_t run_id) {
  ResultsStore store(db);
  std::map<std::string, std::string> rows;
  for (const SampleResult& r : store.results(run_id)) {
    rows[ResultsStore::result_key(r.task, r.sample_key, r.policy, r.budget)] =
        std::to_string(r.length) + "|" + exact(r.depth) + "|" + std::to_string(r.sample_index) + "|" + r.grid_json + "|" +
        std::to_string(r.query_aware) + "|" + r.prediction + "|" + r.reference + "|" + exact(r.score) + "|" +
        exact(r.kept_ratio) + "|" + std::to_string(r.kv_bytes) + "|" + std::to_string(r.kv_bytes_full) + "|" +
        exact(r.ttft_ms) + "|" + exact(r.decode_tok_s) + "|" + r.extra_json;
  }
  return rows;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void sql(const std::string& db, const std::string& statement) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(handle, statement.c_str(), nullptr, nullptr, &message), SQLITE_OK) << (message ? message : "");
  sqlite3_free(message);
  sqlite3_close(handle);
}

int64_t count(const std::string& db, const std::string& query) {
  sqlite3* handle = nullptr;
  sqlite3_open(db.c_str(), &handle);
  sqlite3_stmt* statement = nullptr;
  int64_t value = -1;
  if (sqlite3_prepare_v2(handle, query.c_str(), -1, &statement, nullptr) == SQLITE_OK && sqlite3_step(statement) == SQLITE_ROW) {
    value = sqlite3_column_int64(statement, 0);
  }
  sqlite3_finalize(statement);
  sqlite3_close(handle);
  return value;
}

// Expects merge_results to refuse with a UsageError holding `expected`, and OUT to be as before:
// absent when it was absent, byte for byte the same file when it existed.
void expect_refused(const std::string& out, const std::vector<std::string>& inputs, const std::string& expected) {
  const bool existed = std::filesystem::exists(out);
  const std::string before = existed ? file_bytes(out) : "";
  try {
    merge_results(out, inputs);
    ADD_FAILURE() << "merge accepted; expected: " << expected;
  } catch (const kvevict::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::filesystem::exists(out), existed) << expected;
  if (existed) {
    EXPECT_EQ(file_bytes(out), before) << "OUT changed on a refusal: " << expected;
  }
}

}  // namespace

TEST(ResultsMerge, ThreeShardsMergeIntoTheUnshardedRunRowForRow) {
  TempDb whole("merge_whole"), s0("merge_s0"), s1("merge_s1"), s2("merge_s2"), out("merge_out");
  const EvalConfig config = config_for();
  const int64_t whole_id = run_part(config, whole.path, "");
  run_part(config, s0.path, "0/3");
  run_part(config, s1.path, "1/3");
  run_part(config, s2.path, "2/3");
  // Each shard is only a part.
  EXPECT_LT(rows_of(s1.path, 1).size(), rows_of(whole.path, whole_id).size());

  const MergeSummary summary = merge_results(out.path, {s2.path, s0.path, s1.path});  // any order
  EXPECT_EQ(summary.outcome, MergeSummary::Outcome::Merged);
  EXPECT_EQ(summary.shards, 3);
  EXPECT_EQ(summary.results, 10 * 2 * 3);
  EXPECT_EQ(rows_of(out.path, summary.run_id), rows_of(whole.path, whole_id));

  ResultsStore merged(out.path), reference(whole.path);
  const RunRecord run = *merged.run(summary.run_id);
  const RunRecord expected = *reference.run(whole_id);
  EXPECT_EQ(run.shard, "");
  EXPECT_EQ(run.status, "finished");
  EXPECT_EQ(run.config_hash, expected.config_hash);
  EXPECT_EQ(run.config_yaml, expected.config_yaml);
  EXPECT_EQ(run.model_hash, expected.model_hash);
  EXPECT_EQ(run.name, "merge");
  EXPECT_FALSE(run.finished_at.empty());
  EXPECT_EQ(run.started_at, ResultsStore(s0.path).run(1)->started_at);  // shard 0 started first
  // The aggregates are recomputed: the leaderboard of the merge is that of the unsharded run.
  auto a = merged.leaderboard(), b = reference.leaderboard();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 2u * 2 * 3);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].task + a[i].policy + a[i].budget, b[i].task + b[i].policy + b[i].budget);
    EXPECT_EQ(a[i].samples, b[i].samples);
    EXPECT_DOUBLE_EQ(a[i].score, b[i].score);
    EXPECT_DOUBLE_EQ(a[i].kept_ratio, b[i].kept_ratio);
    EXPECT_DOUBLE_EQ(a[i].kv_bytes, b[i].kv_bytes);
  }
  // The same config unsharded into OUT is now skipped: the merged run has the whole run's identity.
  FakeRunner runner("fake:");
  ResultsStore store(out.path);
  EXPECT_TRUE(run_eval(config, runner, store, {}).skipped);
}

TEST(ResultsMerge, ShardsInOneDatabaseAndEmptyShardsMerge) {
  TempDb shared("merge_shared"), whole("merge_whole1"), out("merge_out1");
  const EvalConfig config = config_for();
  const int64_t whole_id = run_part(config, whole.path, "");
  // 12 shards of 10 samples: shards 10 and 11 are empty, and still recorded as finished runs.
  for (int i = 0; i < 12; ++i) run_part(config, shared.path, std::to_string(i) + "/12");
  EXPECT_EQ(ResultsStore(shared.path).count_results(12), 0);
  EXPECT_EQ(ResultsStore(shared.path).run(12)->status, "finished");
  const MergeSummary summary = merge_results(out.path, {shared.path});
  EXPECT_EQ(summary.shards, 12);
  EXPECT_EQ(rows_of(out.path, summary.run_id), rows_of(whole.path, whole_id));
  // A whole run is shard 0/1: merging it copies it.
  TempDb copy("merge_copy");
  const MergeSummary copied = merge_results(copy.path, {whole.path});
  EXPECT_EQ(copied.shards, 1);
  EXPECT_EQ(rows_of(copy.path, copied.run_id), rows_of(whole.path, whole_id));
}

TEST(ResultsMerge, MergingTheSameShardsAgainChangesNothing) {
  TempDb s0("merge_i0"), s1("merge_i1"), out("merge_iout");
  const EvalConfig config = config_for();
  run_part(config, s0.path, "0/2");
  run_part(config, s1.path, "1/2");
  const MergeSummary first = merge_results(out.path, {s0.path, s1.path});
  const std::string before = file_bytes(out.path);
  const auto rows = rows_of(out.path, first.run_id);
  for (int again = 0; again < 2; ++again) {
    const MergeSummary second = merge_results(out.path, {s1.path, s0.path, s0.path});  // a repeated input is read once
    EXPECT_EQ(second.outcome, MergeSummary::Outcome::Unchanged);
    EXPECT_EQ(second.run_id, first.run_id);
  }
  EXPECT_EQ(ResultsStore(out.path).runs().size(), 1u);
  EXPECT_EQ(rows_of(out.path, first.run_id), rows);
  EXPECT_EQ(file_bytes(out.path), before);
  EXPECT_EQ(count(out.path, "SELECT COUNT(*) FROM aggregates"), 2 * 2 * 3);
}

TEST(ResultsMerge, AnInterruptedMergeIsCompletedNotDuplicated) {
  TempDb s0("merge_c0"), s1("merge_c1"), out("merge_cout");
  const EvalConfig config = config_for();
  run_part(config, s0.path, "0/2");
  run_part(config, s1.path, "1/2");
  const MergeSummary first = merge_results(out.path, {s0.path, s1.path});
  // As if killed between the copy's commit and the aggregates.
  sql(out.path, "UPDATE runs SET status = 'running', finished_at = NULL; DELETE FROM aggregates;");
  EXPECT_TRUE(ResultsStore(out.path).leaderboard().empty());
  const MergeSummary again = merge_results(out.path, {s0.path, s1.path});
  EXPECT_EQ(again.outcome, MergeSummary::Outcome::Completed);
  EXPECT_EQ(again.run_id, first.run_id);
  EXPECT_EQ(ResultsStore(out.path).runs().size(), 1u);
  EXPECT_EQ(ResultsStore(out.path).run(first.run_id)->status, "finished");
  EXPECT_EQ(ResultsStore(out.path).leaderboard().size(), 2u * 2 * 3);
}

TEST(ResultsMerge, TablesAndColumnsOfALaterSchemaAreCopiedGenerically) {
  TempDb s0("merge_g0"), s1("merge_g1"), out("merge_gout");
  const EvalConfig config = config_for();
  run_part(config, s0.path, "0/2");
  run_part(config, s1.path, "1/2");
  ResultsStore{out.path};
  // What a later schema may add: a content table keyed by a hash, a per-run table with its own
  // rowid, a column of results.
  const std::string schema =
      "CREATE TABLE later_content (hash TEXT PRIMARY KEY, source TEXT NOT NULL);"
      "CREATE TABLE run_notes (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL REFERENCES runs(id), "
      "note TEXT NOT NULL);"
      "ALTER TABLE results ADD COLUMN later_hash TEXT REFERENCES later_content(hash);";
  for (const std::string& db : {s0.path, s1.path, out.path}) sql(db, schema);
  sql(s0.path, "INSERT INTO later_content VALUES ('h-alpha', 'alpha v1'), ('h-beta', 'beta v1');"
               "INSERT INTO run_notes (run_id, note) VALUES (1, 'shard zero');"
               "UPDATE results SET later_hash = 'h-' || policy;");
  sql(s1.path, "INSERT INTO later_content VALUES ('h-alpha', 'alpha v1'), ('h-beta', 'beta v1');"
               "INSERT INTO run_notes (run_id, note) VALUES (1, 'shard one'), (1, 'again');"
               "UPDATE results SET later_hash = 'h-' || policy;");
  sql(out.path, "INSERT INTO later_content VALUES ('h-old', 'another policy');");
  const MergeSummary summary = merge_results(out.path, {s0.path, s1.path});
  const std::string id = std::to_string(summary.run_id);
  EXPECT_EQ(count(out.path, "SELECT COUNT(*) FROM later_content"), 3);  // INSERT OR IGNORE: each hash once
  EXPECT_EQ(count(out.path, "SELECT COUNT(*) FROM run_notes WHERE run_id = " + id), 3);
  EXPECT_EQ(count(out.path, "SELECT COUNT(*) FROM results WHERE run_id = " + id + " AND later_hash = 'h-' || policy"),
            summary.results);
  // Schema v4's own content tables come along the same way: every result's policy and prompt.
  EXPECT_EQ(count(out.path, "SELECT COUNT(*) FROM results r WHERE r.run_id = " + id +
                                " AND EXISTS (SELECT 1 FROM policies p WHERE p.hash = r.policy_hash)"
                                " AND EXISTS (SELECT 1 FROM prompts q WHERE q.hash = r.prompt_hash)"),
            summary.results);
  EXPECT_EQ(summary.results, 10 * 2 * 3);
}

TEST(ResultsMerge, InputsOfAnotherConfigOrModelAreRefusedBeforeOutIsTouched) {
  TempDb s0("merge_r0"), s1("merge_r1"), other("merge_r2"), model("merge_r3"), out("merge_rout");
  const EvalConfig config = config_for();
  run_part(config, s0.path, "0/2");
  run_part(config, s1.path, "1/2");
  run_part(config_for(6), other.path, "1/2");
  // The same config on a changed model file (same path, other content): only model_hash differs.
  run_part(config, model.path, "1/2");
  sql(model.path, "UPDATE runs SET model_hash = '0123456789abcdef0123', model = '/models/other.gguf'");
  expect_refused(out.path, {s0.path, other.path}, other.path + " run #1 is of another config than " + s0.path + " run #1");
  expect_refused(out.path, {s0.path, model.path}, model.path + " run #1 is of another model than " + s0.path + " run #1");
  expect_refused(out.path, {s0.path, model.path}, "(/models/other.gguf vs fake:, model_hash 0123456789ab vs ");
  // OUT holding other runs is left byte for byte as it was.
  run_part(config_for(9), out.path, "");
  expect_refused(out.path, {s0.path, other.path}, "merge joins the shards of one config and one model");
  expect_refused(out.path, {s0.path, s1.path, model.path}, "another model");
}

TEST(ResultsMerge, MissingUnfinishedConflictingAndMixedShardsAreRefused) {
  TempDb s0("merge_m0"), s2("merge_m2"), crashed("merge_m1"), twice("merge_m0b"), third("merge_t"), out("merge_mout");
  const EvalConfig config = config_for();
  run_part(config, s0.path, "0/4");
  run_part(config, s2.path, "2/4");
  expect_refused(out.path, {s0.path, s2.path}, "2 of 4 shards missing: 1/4, 3/4");
  // A shard whose task died: its run failed; the message says how to continue it.
  FailingRunner failing(3);
  EXPECT_THROW(run_part(config, crashed.path, "1/4", &failing), kvevict::RuntimeError);
  expect_refused(out.path, {s0.path, crashed.path, s2.path},
                 "shard 1/4 is not finished: " + crashed.path + " run #1 failed (simulated crash); continue it with "
                 "kvevict eval --resume --shard 1/4 --db " + crashed.path);
  // One shard twice with different results (here: a tampered prediction).
  run_part(config, twice.path, "0/4");
  sql(twice.path, "UPDATE results SET prediction = 'tampered' WHERE id = 1");
  expect_refused(out.path, {s0.path, twice.path}, "shard 0/4 finished twice with different results: " + s0.path +
                                                      " run #1 and " + twice.path + " run #1 (result '");
  // Mixed shard counts.
  run_part(config, third.path, "1/3");
  expect_refused(out.path, {s0.path, third.path}, third.path + " run #1 is shard 1/3 but " + s0.path +
                                                      " run #1 is shard 0/4: shards of different counts");
  // Bad inputs: missing (never created), OUT itself.
  const std::string absent = s0.path + ".absent.db";
  expect_refused(out.path, {s0.path, absent}, absent + ": no such results database");
  EXPECT_FALSE(std::filesystem::exists(absent));
  run_part(config_for(9), out.path, "");
  expect_refused(out.path, {s0.path, out.path}, out.path + ": is also the output database");
}

TEST(ResultsMerge, AnUnfinishedShardSupersededByAFinishedOneIsIgnored) {
  TempDb s0("merge_u0"), s1("merge_u1"), whole("merge_uw"), out("merge_uout");
  const EvalConfig config = config_for();
  const int64_t whole_id = run_part(config, whole.path, "");
  run_part(config, s0.path, "0/2");
  FailingRunner failing(2);
  EXPECT_THROW(run_part(config, s1.path, "1/2", &failing), kvevict::RuntimeError);
  {  // a new (not resumed) run of the same shard then finished in the same file
    FakeRunner runner("fake:");
    ResultsStore store(s1.path);
    std::vector<Sample> samples = shard_samples(plan_samples(config, runner), parse_shard("1/2"));
    EvalOptions options;
    options.samples = &samples;
    options.shard = "1/2";
    run_eval(config, runner, store, options);
  }
  std::vector<std::string> notes;
  const MergeSummary summary =
      merge_results(out.path, {s0.path, s1.path}, [&](const std::string& text) { notes.push_back(text); });
  EXPECT_EQ(rows_of(out.path, summary.run_id), rows_of(whole.path, whole_id));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(s1.path + " run #1 (shard 1/2, failed) is superseded by " + s1.path + " run #2"),
            std::string::npos)
      << notes[0];
}

TEST(ResultsMerge, OutHoldingThisRunWithOtherResultsIsRefused) {
  TempDb s0("merge_o0"), s1("merge_o1"), out("merge_oout");
  const EvalConfig config = config_for();
  run_part(config, s0.path, "0/2");
  run_part(config, s1.path, "1/2");
  run_part(config, out.path, "");
  sql(out.path, "UPDATE results SET score = score + 1 WHERE id = 3");
  expect_refused(out.path, {s0.path, s1.path}, out.path + ": already holds run #1 of this config and model");
}
