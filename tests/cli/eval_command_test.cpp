// `kvevict eval`, `leaderboard` and `report` as processes: exit codes and messages for bad configs,
// resume after SIGKILL, several writers on one database, every output format.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "evals/results_store.h"
#include "process.h"

using kvevict::test::run_shell;

namespace {

struct Workdir {
  std::filesystem::path path;
  explicit Workdir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("kvevict_cli_" + name + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Workdir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(path / name) << content;
    return (path / name).string();
  }
  std::string db() const { return (path / "kvevict.db").string(); }
};

std::string cli_command(const std::string& args) { return std::string(KVEVICT_BINARY) + " " + args; }

const char* kFakeConfig =
    "name: cli\n"
    "model: \"fake:%s\"\n"
    "seed: %d\n"
    "tasks:\n"
    "  passkey: {lengths: [60, 120], samples: 3}\n"
    "  needle: {lengths: [100, 200], depths: [0, 50, 100]}\n"
    "policies: [alpha, beta]\n"
    "budgets: [\"20%%\", \"40\", full]\n";

std::string fake_config(const std::string& options, int seed) {
  char text[1024];
  std::snprintf(text, sizeof(text), kFakeConfig, options.c_str(), seed);
  return text;
}

}  // namespace

TEST(EvalCommand, ConfigErrorsExitWith2AndNameTheLocation) {
  Workdir dir("errors");
  struct Case {
    std::string yaml, expected;
  };
  std::vector<Case> cases = {
      {fake_config("", 1) + "colour: blue\n", "bad.yaml:9:1: error: colour: unknown key 'colour'"},
      {"model: \"fake:\"\nthreads: many\ntasks: {passkey: {}}\npolicies: [a]\nbudgets: [full]\n",
       "bad.yaml:2:10: error: threads: expected an integer, got 'many'"},
      {"model: \"fake:\"\ntasks: {passkey: {}}\npolicies: [a]\nbudgets: [\"200%\"]\n",
       "bad.yaml:4:11: error: budgets[0]: bad budget: '200%'"},
      {"model: /nowhere/model.gguf\ntasks: {passkey: {}}\npolicies: [a]\nbudgets: [full]\n",
       "bad.yaml:1:8: error: model: model file '/nowhere/model.gguf' does not exist"},
  };
  for (const auto& c : cases) {
    std::string path = dir.file("bad.yaml", c.yaml);
    auto result = run_shell(cli_command("eval -c " + path + " --db " + dir.db()));
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << result.output;
    EXPECT_FALSE(std::filesystem::exists(dir.db())) << "work started before validation finished";
  }
  auto missing = run_shell(cli_command("eval -c " + (dir.path / "none.yaml").string()));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("none.yaml: cannot open config file"), std::string::npos) << missing.output;
  std::string good = dir.file("good.yaml", fake_config("", 1));
  auto bad_set = run_shell(cli_command("eval -c " + good + " --db " + dir.db() + " --set tasks.passkey.lengths=[x]"));
  EXPECT_EQ(bad_set.exit_code, 2);
  EXPECT_NE(bad_set.output.find("--set tasks.passkey.lengths: error"), std::string::npos) << bad_set.output;
}

TEST(EvalCommand, RunsPrintsTheLeaderboardAndSkipsARepeat) {
  Workdir dir("run");
  std::string config = dir.file("c.yaml", fake_config("", 1));
  auto result = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --set tasks.passkey.lengths=[80]"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("passkey"), std::string::npos);
  EXPECT_NE(result.output.find("results written"), std::string::npos);
  EXPECT_NE(result.output.find("cli: "), std::string::npos) << "plain progress lines when stderr is not a TTY";
  auto again = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --set tasks.passkey.lengths=[80]"));
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.output.find("skipping"), std::string::npos) << again.output;
  auto quiet = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --quiet --force --limit 1"));
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.output, "");
  kvevict::evals::ResultsStore store(dir.db());
  auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_NE(runs[0].config_yaml.find("lengths: [80]"), std::string::npos);
  EXPECT_NE(runs[1].config_yaml.find("limit: 1"), std::string::npos);
  EXPECT_EQ(store.count_results(runs[1].id), (2 * 1 + 6 * 1) * 2 * 3);
}

TEST(EvalCommand, ResumeAfterSigkillLosesAndDuplicatesNothing) {
  Workdir dir("resume");
  std::string config = dir.file("c.yaml", fake_config("delay_ms=15", 2));
  const int64_t total = (6 + 6) * 2 * 3;
  pid_t pid = kvevict::test::spawn_kvevict({"eval", "-c", config, "--db", dir.db(), "--quiet"});
  // Wait until some, but not all, results are committed, then kill without warning.
  int64_t stored = 0;
  for (int i = 0; i < 400 && stored < total / 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!std::filesystem::exists(dir.db())) continue;
    kvevict::evals::ResultsStore store(dir.db());
    auto runs = store.runs();
    stored = runs.empty() ? 0 : store.count_results(runs[0].id);
  }
  kill(pid, SIGKILL);
  EXPECT_EQ(kvevict::test::wait_exit_code(pid), -SIGKILL);
  {
    kvevict::evals::ResultsStore store(dir.db());
    auto runs = store.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "running");
    stored = store.count_results(runs[0].id);
    EXPECT_GT(stored, 0);
    EXPECT_LT(stored, total);
    EXPECT_EQ(stored % 6, 0) << "a sample's results are committed together";
  }
  auto resumed = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming run #1"), std::string::npos) << resumed.output;
  kvevict::evals::ResultsStore store(dir.db());
  auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "finished");
  auto rows = store.results(runs[0].id);
  EXPECT_EQ(static_cast<int64_t>(rows.size()), total);
  std::set<std::string> keys;
  for (const auto& row : rows) keys.insert(kvevict::evals::ResultsStore::result_key(row.task, row.sample_key, row.policy, row.budget));
  EXPECT_EQ(static_cast<int64_t>(keys.size()), total);
}

TEST(EvalCommand, SeveralProcessesWriteOneDatabase) {
  Workdir dir("concurrent");
  const int processes = 4;
  const int64_t per_run = (6 + 6) * 2 * 3;
  std::vector<pid_t> pids;
  for (int p = 0; p < processes; ++p) {
    const std::string name = "c" + std::to_string(p) + ".yaml";
    std::string config = dir.file(name, fake_config("delay_ms=3", 100 + p));
    pids.push_back(kvevict::test::spawn_kvevict({"eval", "-c", config, "--db", dir.db(), "--quiet"}));
  }
  for (pid_t pid : pids) EXPECT_EQ(kvevict::test::wait_exit_code(pid), 0);
  kvevict::evals::ResultsStore store(dir.db());
  auto runs = store.runs();
  ASSERT_EQ(runs.size(), static_cast<size_t>(processes));
  for (const auto& run : runs) {
    EXPECT_EQ(run.status, "finished");
    EXPECT_EQ(store.count_results(run.id), per_run);
  }
}

TEST(LeaderboardCommand, EveryFormatAndFilters) {
  Workdir dir("leaderboard");
  std::string config = dir.file("c.yaml", fake_config("", 3));
  ASSERT_EQ(run_shell(cli_command("eval -q -c " + config + " --db " + dir.db())).exit_code, 0);
  auto json = run_shell(cli_command("leaderboard --db " + dir.db() + " --format json"));
  ASSERT_EQ(json.exit_code, 0) << json.output;
  auto records = nlohmann::json::parse(json.output);
  ASSERT_EQ(records.size(), 2u * 2 * 3 + 2 * 3);  // 2 tasks, and their pooled "all tasks" cells
  for (const auto& record : records) {
    for (const char* key : {"task", "policy", "budget", "score", "samples", "kv_bytes"}) EXPECT_TRUE(record.contains(key));
  }
  auto filtered = nlohmann::json::parse(run_shell(cli_command("leaderboard --db " + dir.db() + " --format json --task needle")).output);
  EXPECT_EQ(filtered.size(), 2u * 3);
  auto none = nlohmann::json::parse(run_shell(cli_command("leaderboard --db " + dir.db() + " --format json --model nomatch")).output);
  EXPECT_EQ(none.size(), 0u);
  auto csv = run_shell(cli_command("leaderboard --db " + dir.db() + " --format csv"));
  EXPECT_EQ(csv.output.rfind("model,task,policy,budget,score,samples,kv_bytes", 0), 0u) << csv.output;
  auto md = run_shell(cli_command("leaderboard --db " + dir.db() + " --format md"));
  EXPECT_NE(md.output.find("| policy | 20% | 40 | full | mean | iso@95% | n |"), std::string::npos) << md.output;
  auto table = run_shell(cli_command("leaderboard --db " + dir.db() + " --metric kv_bytes"));
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.output.find("kv_bytes"), std::string::npos);
  EXPECT_EQ(run_shell(cli_command("leaderboard --db " + dir.db() + " --format xml")).exit_code, 2);
  EXPECT_EQ(run_shell(cli_command("leaderboard --db " + (dir.path / "missing.db").string())).exit_code, 2);
}

TEST(ReportCommand, WritesIndexAndPlots) {
  Workdir dir("report");
  std::string config = dir.file("c.yaml", fake_config("", 4));
  ASSERT_EQ(run_shell(cli_command("eval -q -c " + config + " --db " + dir.db())).exit_code, 0);
  auto out = dir.path / "report";
  auto result = run_shell(cli_command("report --db " + dir.db() + " --out " + out.string()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::filesystem::exists(out / "index.html"));
  int svgs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(out)) svgs += entry.path().extension() == ".svg";
  // score and iso-quality plots for 2 tasks and their pooled group + needle heatmaps for 2 policies x
  // 2 compressed budgets (at full every cell scores 100: no heatmap)
  EXPECT_EQ(svgs, 3 * 2 + 2 * 2);
}

TEST(EvalCommand, EndToEndOnStories260K) {
  const std::string models = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(models + "/stories260K.bin")) GTEST_SKIP() << "stories260K not found in " << models;
  Workdir dir("stories");
  const std::string config = std::string(KVEVICT_TEST_SOURCE_DIR) + "/../configs/stories260k-smoke.yaml";
  const std::string common = " --db " + dir.db() + " --set model=" + models + "/stories260K.bin --set tokenizer=" +
                             models + "/tok512.bin";
  auto result = run_shell(cli_command("eval -c " + config + common));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  kvevict::evals::ResultsStore store(dir.db());
  auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "finished");
  EXPECT_EQ(runs[0].model_hash, "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
  // passkey 2x2 + needle 3 + kv_retrieval 1 + fidelity 1 samples, 12 policies x 3 budgets each.
  EXPECT_EQ(store.count_results(runs[0].id), (4 + 3 + 1 + 1) * 12 * 3);
  for (const auto& row : store.results(runs[0].id)) {
    if (row.budget == "full") {
      EXPECT_DOUBLE_EQ(row.kept_ratio, 1.0);
    } else {
      EXPECT_LT(row.kv_bytes, row.kv_bytes_full) << row.policy << " " << row.budget;
    }
    if (row.task == "fidelity" && row.budget == "full") {
      EXPECT_DOUBLE_EQ(row.score, 100.0);
    }
  }
  auto json = nlohmann::json::parse(run_shell(cli_command("leaderboard --format json --db " + dir.db())).output);
  EXPECT_EQ(json.size(), 4u * 12 * 3 + 12 * 3);  // 4 tasks, and the pooled "all tasks" cells
}

TEST(EvalCommand, DatabasePathsThatCannotPersistAreRefusedBeforeWork) {
  Workdir dir("nopersist");
  std::string config = dir.file("c.yaml", fake_config("", 1));
  for (const std::string& db : {std::string("''"), std::string(":memory:"), std::string("'file:r.db?mode=memory'"),
                                dir.path.string()}) {
    auto result = run_shell("cd " + dir.path.string() + " && " + cli_command("eval -c c.yaml --db " + db));
    EXPECT_EQ(result.exit_code, 2) << db << ": " << result.output;
    EXPECT_EQ(result.output.find("results written"), std::string::npos) << db << ": " << result.output;
  }
  // Nothing but the config was created (no r.db, no temporary database left behind).
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) entries += entry.path() != config;
  EXPECT_EQ(entries, 0);
}

TEST(EvalCommand, DuplicateGridValuesAndTooManyThreadsExitWith2BeforeWork) {
  Workdir dir("grid");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string config = dir.file("c.yaml", fake_config("", 1));
  struct Case {
    std::string set, expected;
  };
  std::vector<Case> cases = {
      // Used to end in a raw "UNIQUE constraint failed" with the run left "running".
      {"tasks.needle.depths=[50,50]", "--set tasks.needle.depths: error: tasks.needle.depths: value 50 appears twice"},
      {"tasks.passkey.lengths=[60,60]", "value 60 appears twice"},
      {"threads=" + std::to_string(cores + 1), "--set threads: error: threads: value " + std::to_string(cores + 1)},
      {"tasks.passkey.lengths=[1048576]", "value 1048576 out of range [16, 131072]"},
  };
  for (const auto& c : cases) {
    auto result = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --set " + c.set));
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("UNIQUE"), std::string::npos) << result.output;
    EXPECT_FALSE(std::filesystem::exists(dir.db()));
  }
}

TEST(EvalCommand, LengthsAboveTheModelsContextExitWith2BeforeWork) {
  const std::string models = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(models + "/stories260K.bin")) GTEST_SKIP() << "stories260K not found in " << models;
  Workdir dir("context");
  std::string config = dir.file("c.yaml", "model: " + models + "/stories260K.bin\ntokenizer: " + models +
                                              "/tok512.bin\ndevice: cpu\ntasks:\n  passkey: {lengths: [128, 4096]}\n"
                                              "  fidelity: {lengths: [256], continuation: 300}\n"
                                              "policies: [h2o]\nbudgets: [full]\n");
  auto result = run_shell(cli_command("eval -c " + config + " --db " + dir.db()));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("c.yaml:5:28: error: tasks.passkey.lengths: length 4096 exceeds the model's context of "
                               "512 tokens"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("c.yaml:6:44: error: tasks.fidelity.continuation: 300 tokens after a context of 256"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.db())) << "the database was touched";
  // A length that fits, but whose question and answer do not: refused once the samples are built,
  // still before the database is opened (it used to decode past the model's 512 positions).
  std::string near = dir.file("near.yaml", "model: " + models + "/stories260K.bin\ntokenizer: " + models +
                                               "/tok512.bin\ndevice: cpu\ntasks:\n  needle: {lengths: [500], "
                                               "depths: [50], needles: 8}\npolicies: [h2o]\nbudgets: [full]\n");
  auto over = run_shell(cli_command("eval -c " + near + " --db " + dir.db()));
  EXPECT_EQ(over.exit_code, 2) << over.output;
  EXPECT_NE(over.output.find("near.yaml:5:21: error: tasks.needle.lengths: sample len=500/depth=50/i=0 needs"),
            std::string::npos)
      << over.output;
  EXPECT_NE(over.output.find("more than the model's context of 512 tokens"), std::string::npos) << over.output;
  EXPECT_FALSE(std::filesystem::exists(dir.db())) << "the database was touched";
}

TEST(EvalCommand, ASecondResumeOfOneRunExitsWithAClearMessage) {
  Workdir dir("resume2");
  // 60 ms per result: the first resume must still be running when the second one has started
  // (a sanitizer build's kvevict takes a few hundred ms to start, twice where it restarts for its
  // BLAS kernels; with 15 ms the first resume could finish before the second looked).
  std::string config = dir.file("c.yaml", fake_config("delay_ms=60", 5));
  const int64_t total = (6 + 6) * 2 * 3;
  auto stored = [&] {
    if (!std::filesystem::exists(dir.db())) return int64_t{0};
    kvevict::evals::ResultsStore store(dir.db());
    auto runs = store.runs();
    return runs.empty() ? int64_t{0} : store.count_results(runs[0].id);
  };
  pid_t killed = kvevict::test::spawn_kvevict({"eval", "-c", config, "--db", dir.db(), "--quiet"});
  for (int i = 0; i < 400 && stored() < total / 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(killed, SIGKILL);
  kvevict::test::wait_exit_code(killed);
  pid_t first = kvevict::test::spawn_kvevict({"eval", "-c", config, "--db", dir.db(), "--quiet", "--resume"});
  // Wait until the first resume owns the run (its pid is recorded), then start a second one.
  bool owned = false;
  for (int i = 0; i < 400 && !owned; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(dir.db().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db, "SELECT owner FROM runs WHERE id = 1", -1, &stmt, nullptr) == SQLITE_OK &&
          sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0)) {
        owned = std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0))).rfind(std::to_string(first) + ":", 0) == 0;
      }
      sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
  }
  ASSERT_TRUE(owned) << "the first --resume never claimed the run";
  auto second = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --resume"));
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("run #1 is being written by another kvevict process (pid " + std::to_string(first) + ")"),
            std::string::npos)
      << second.output;
  EXPECT_EQ(second.output.find("UNIQUE"), std::string::npos) << second.output;
  EXPECT_EQ(kvevict::test::wait_exit_code(first), 0);
  kvevict::evals::ResultsStore store(dir.db());
  auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "finished");
  EXPECT_EQ(store.count_results(1), total);
}

// `prefill_attention: flashinfer` with the decoder on the CPU: exit 2 at the key, before the model
// loads or the database exists (never a run quietly decoded with the own kernel).
TEST(EvalCommand, FlashInferPrefillOnTheCpuExitsWith2AtTheKeyBeforeWork) {
  const std::string models = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(models + "/stories260K.bin")) GTEST_SKIP() << "stories260K not found in " << models;
  Workdir dir("prefill");
  const std::string config = dir.file(
      "c.yaml", "model: " + models + "/stories260K.bin\ntokenizer: " + models + "/tok512.bin\ndevice: cpu\n" +
                    "prefill_attention: flashinfer\ntasks: {passkey: {lengths: [160], samples: 1}}\n"
                    "policies: [snapkv]\nbudgets: [\"30%\"]\n");
  auto result = run_shell(cli_command("eval -c " + config + " --db " + dir.db()));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find(config + ":4:20: error: prefill_attention: flashinfer runs on the CUDA decoder"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.db()));
  // The same config with the key's default runs (so the refusal above is the key's).
  auto own = run_shell(cli_command("eval -q -c " + config + " --db " + dir.db() + " --set prefill_attention=own"));
  EXPECT_EQ(own.exit_code, 0) << own.output;
  EXPECT_EQ(kvevict::evals::ResultsStore(dir.db()).runs().at(0).prefill_attention, "own");
}

// `prefill:` through the CLI: a bad value exits 2 at the key before the database exists; per_run
// runs, says how many prefills its runs did besides the full-cache ones, and records per_run.
TEST(EvalCommand, PrefillModeBadValueExitsWith2AndPerRunCountsItsPrefills) {
  const std::string models = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(models + "/stories260K.bin")) GTEST_SKIP() << "stories260K not found in " << models;
  Workdir dir("prefill_mode");
  const std::string config = dir.file(
      "c.yaml", "model: " + models + "/stories260K.bin\ntokenizer: " + models + "/tok512.bin\ndevice: cpu\n" +
                    "prefill: per-run\ntasks: {passkey: {lengths: [160], samples: 2}}\n"
                    "policies: [snapkv]\nbudgets: [\"30%\", full]\n");
  auto bad = run_shell(cli_command("eval -c " + config + " --db " + dir.db()));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(config + ":4:10: error: prefill: 'per-run' is not one of auto|shared|per_run"),
            std::string::npos)
      << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir.db()));
  auto per_run = run_shell(cli_command("eval -c " + config + " --db " + dir.db() + " --set prefill=per_run"));
  EXPECT_EQ(per_run.exit_code, 0) << per_run.output;
  EXPECT_NE(per_run.output.find("2 full-cache prefills, 2 prefills by single runs"), std::string::npos)
      << per_run.output;
  EXPECT_EQ(kvevict::evals::ResultsStore(dir.db()).runs().at(0).prefill, "per_run");
}
