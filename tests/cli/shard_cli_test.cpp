// `kvevict eval --shard`, `kvevict merge` and `kvevict slurm` as processes: bad specs and refused
// merges exit 2 with nothing written; shards merged equal the unsharded run (fake model, and
// stories260K when present); the SLURM scripts hold the array, the dependency and quoted paths, and,
// run by a stand-in sbatch from a folder with a space and a quote in its name, reproduce the
// unsharded run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "evals/results_store.h"
#include "process.h"

using kvevict::evals::ResultsStore;
using kvevict::test::run_shell;

namespace {

namespace fs = std::filesystem;

std::string quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct Workdir {
  fs::path path;
  explicit Workdir(const std::string& name)
      : path(fs::temp_directory_path() / ("kvevict shard's " + name + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Workdir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(path / name) << content;
    return (path / name).string();
  }
  std::string at(const std::string& name) const { return (path / name).string(); }
};

std::string cli(const std::string& args) { return quote(KVEVICT_BINARY) + " " + args; }

const char* kFakeConfig =
    "name: shards\n"
    "model: \"fake:\"\n"
    "seed: 4\n"
    "tasks:\n"
    "  passkey: {lengths: [60, 120], samples: 2}\n"
    "  needle: {lengths: [100, 200], depths: [0, 50, 100]}\n"
    "policies: [alpha, beta]\n"
    "budgets: [\"20%\", full]\n";

// The compared columns of the newest finished whole run, keyed by result: what CI compares.
std::map<std::string, std::string> whole_run_rows(const std::string& db) {
  ResultsStore store(db);
  int64_t id = 0;
  for (const auto& run : store.runs()) {
    if (run.shard.empty() && run.status == "finished") id = run.id;
  }
  std::map<std::string, std::string> rows;
  for (const auto& r : store.results(id)) {
    char numbers[128];
    std::snprintf(numbers, sizeof(numbers), "%.17g|%.17g|%lld", r.score, r.kept_ratio, static_cast<long long>(r.kv_bytes));
    rows[ResultsStore::result_key(r.task, r.sample_key, r.policy, r.budget)] = r.prediction + "|" + numbers;
  }
  return rows;
}

}  // namespace

TEST(ShardCli, BadShardSpecsExitWith2BeforeTheModelOrDatabaseIsTouched) {
  Workdir dir("spec");
  const std::string config = dir.file("c.yaml", kFakeConfig);
  const std::string db = dir.at("k.db");
  struct Case {
    std::string spec, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"2/2", "--shard '2/2': shard index 2 is out of range: I must be in [0, 2)"},
           {"0/0", "--shard '0/0': shard count 0 is out of range: N must be in [1, 10000]"},
           {"1/10001", "shard count 10001 is out of range"},
           {"-1/2", "--shard '-1/2': expected I/N"},
           {"half", "--shard 'half': expected I/N"},
       }) {
    auto result = run_shell(cli("eval -c " + quote(config) + " --db " + quote(db) + " --shard=" + quote(c.spec)));
    EXPECT_EQ(result.exit_code, 2) << c.spec << ": " << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(db)) << c.spec;
  }
  // An empty spec is refused, not taken as "no shard".
  auto empty = run_shell(cli("eval -c " + quote(config) + " --db " + quote(db) + " --shard ''"));
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("--shard '': expected I/N"), std::string::npos) << empty.output;
  EXPECT_FALSE(fs::exists(db));
}

TEST(ShardCli, ShardsMergedThroughTheCliEqualTheUnshardedRun) {
  Workdir dir("merge");
  const std::string config = dir.file("c.yaml", kFakeConfig);
  for (int i = 0; i < 3; ++i) {
    const std::string db = dir.at("shard-" + std::to_string(i) + ".db");
    auto result = run_shell(cli("eval -c " + quote(config) + " --db " + quote(db) + " --shard " + std::to_string(i) + "/3"));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const std::string samples = i == 0 ? "4 of 10 samples" : "3 of 10 samples";
    EXPECT_NE(result.output.find("shard " + std::to_string(i) + "/3: " + samples), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("is shard " + std::to_string(i) + "/3; join the shards with: kvevict merge"),
              std::string::npos)
        << result.output;
  }
  ASSERT_EQ(run_shell(cli("eval -q -c " + quote(config) + " --db " + quote(dir.at("whole.db")))).exit_code, 0);
  const std::string shards = quote(dir.at("shard-0.db")) + " " + quote(dir.at("shard-1.db")) + " " + quote(dir.at("shard-2.db"));

  // Refusals first: a missing shard, another config, an input that does not exist. OUT never appears.
  const std::string out = dir.at("out.db");
  auto missing = run_shell(cli("merge " + quote(out) + " " + quote(dir.at("shard-0.db")) + " " + quote(dir.at("shard-2.db"))));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("1 of 3 shards missing: 1/3"), std::string::npos) << missing.output;
  const std::string other = dir.file("other.yaml", std::string(kFakeConfig) + "limit: 1\n");
  ASSERT_EQ(run_shell(cli("eval -q -c " + quote(other) + " --db " + quote(dir.at("other.db")) + " --shard 1/3")).exit_code, 0);
  auto mixed = run_shell(cli("merge " + quote(out) + " " + quote(dir.at("shard-0.db")) + " " + quote(dir.at("other.db"))));
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("is of another config than"), std::string::npos) << mixed.output;
  auto absent = run_shell(cli("merge " + quote(out) + " " + quote(dir.at("nowhere.db"))));
  EXPECT_EQ(absent.exit_code, 2) << absent.output;
  EXPECT_NE(absent.output.find("nowhere.db: no such results database"), std::string::npos) << absent.output;
  EXPECT_FALSE(fs::exists(dir.at("nowhere.db")));
  auto usage = run_shell(cli("merge " + quote(out)));
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  EXPECT_FALSE(fs::exists(out));

  auto merged = run_shell(cli("merge " + quote(out) + " " + shards));
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  EXPECT_NE(merged.output.find("merged 3 shards of 'shards' (40 results) into"), std::string::npos) << merged.output;
  EXPECT_EQ(whole_run_rows(out), whole_run_rows(dir.at("whole.db")));
  EXPECT_EQ(whole_run_rows(out).size(), 40u);
  auto again = run_shell(cli("merge " + quote(out) + " " + shards));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("already holds run #1, the merge of 3 shards"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("nothing changed"), std::string::npos) << again.output;
  // The leaderboard of the merge is the unsharded run's.
  auto board = [&](const std::string& db) { return run_shell(cli("leaderboard --format csv --db " + quote(db))); };
  EXPECT_EQ(board(out).output, board(dir.at("whole.db")).output);
  EXPECT_NE(board(out).output.find("alpha"), std::string::npos);
}

TEST(ShardCli, TwoShardsOfStories260KMergeIntoTheUnshardedRun) {
  const std::string models = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";
  if (!fs::exists(models + "/stories260K.bin")) GTEST_SKIP() << "stories260K not found in " << models;
  Workdir dir("stories");
  const std::string config = std::string(KVEVICT_TEST_SOURCE_DIR) + "/../configs/stories260k-smoke.yaml";
  const std::string model = " --set model=" + quote(models + "/stories260K.bin") + " --set tokenizer=" + quote(models + "/tok512.bin");
  for (const std::string shard : {"0/2", "1/2"}) {
    const std::string db = dir.at("shard-" + shard.substr(0, 1) + ".db");
    auto result = run_shell(cli("eval -q -c " + quote(config) + model + " --db " + quote(db) + " --shard " + shard));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  ASSERT_EQ(run_shell(cli("eval -q -c " + quote(config) + model + " --db " + quote(dir.at("whole.db")))).exit_code, 0);
  auto merged = run_shell(cli("merge " + quote(dir.at("out.db")) + " " + quote(dir.at("shard-0.db")) + " " +
                                  quote(dir.at("shard-1.db"))));
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  const auto rows = whole_run_rows(dir.at("out.db"));
  EXPECT_EQ(rows.size(), (4u + 3 + 1 + 1) * 12 * 3);
  EXPECT_EQ(rows, whole_run_rows(dir.at("whole.db")));
}

TEST(SlurmCli, ScriptsHoldTheArrayTheDependencyAndQuotedPaths) {
  Workdir dir("slurm");
  const std::string config = dir.file("c.yaml", kFakeConfig);
  const std::string out = dir.at("jobs dir");
  auto result = run_shell("cd " + quote(dir.path.string()) + " && " +
                          cli("slurm c.yaml --shards 3 --out " + quote(out) +
                                  " --partition gpu,cpu --time 1-02:00:00 --set seed=5 --limit 2"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("submit with: bash " + quote(out + "/submit.sh")), std::string::npos) << result.output;
  auto read = [&](const std::string& name) {
    std::ifstream in(out + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string array = read("eval-array.sbatch"), merge = read("merge.sbatch"), submit = read("submit.sh");
  for (const std::string line : {"#SBATCH --array=0-2\n", "#SBATCH --job-name=kvevict-shards\n",
                                  "#SBATCH --partition=gpu,cpu\n", "#SBATCH --time=1-02:00:00\n",
                                  "#SBATCH --cpus-per-task=1\n", "SHARDS=3\n"}) {
    EXPECT_NE(array.find(line), std::string::npos) << line << array;
  }
  EXPECT_NE(array.find("CONFIG=" + quote(config) + "\n"), std::string::npos) << array;
  EXPECT_NE(array.find("OUT_DIR=" + quote(out) + "\n"), std::string::npos) << array;
  EXPECT_NE(array.find("WORKDIR=" + quote(dir.path.string())), std::string::npos) << array;
  EXPECT_NE(array.find("eval -c \"$CONFIG\" --shard \"$SLURM_ARRAY_TASK_ID/$SHARDS\" --db "
                       "\"$OUT_DIR/shard-$SLURM_ARRAY_TASK_ID.db\" --resume --set 'seed=5' --limit 2\n"),
            std::string::npos)
      << array;
  EXPECT_NE(merge.find("MERGED_DB=" + quote(out + "/merged.db") + "\n"), std::string::npos) << merge;
  EXPECT_NE(merge.find("merge \"$MERGED_DB\" \"${inputs[@]}\""), std::string::npos) << merge;
  EXPECT_NE(submit.find("--dependency=\"afterok:$array_job\""), std::string::npos) << submit;
  EXPECT_LT(submit.find("eval-array.sbatch"), submit.find("merge.sbatch")) << submit;
  for (const std::string script : {"eval-array.sbatch", "merge.sbatch", "submit.sh"}) {
    auto syntax = run_shell("bash -n " + quote(out + "/" + script));
    EXPECT_EQ(syntax.exit_code, 0) << script << ": " << syntax.output;
  }
}

TEST(SlurmCli, BadOptionsExitWith2AndWriteNothing) {
  Workdir dir("slurmbad");
  const std::string config = dir.file("c.yaml", kFakeConfig);
  const std::string out = dir.at("jobs");
  struct Case {
    std::string args, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"--shards 0", "--shards"},
           {"--shards 10001", "--shards"},
           {"", "--shards is required"},
           {"--shards 2 --partition 'a b'", "--partition 'a b': a partition name"},
           {"--shards 2 --time soon", "--time 'soon': a SLURM time limit"},
           {"--shards 2 --out " + quote(dir.at("100%")), "the path holds '%'"},
           {"--shards 2 --set colour=blue", "colour: unknown key 'colour'"},
       }) {
    const std::string out_arg = c.args.find("--out") == std::string::npos ? " --out " + quote(out) : "";
    auto result = run_shell(cli("slurm " + quote(config) + " " + c.args + out_arg));
    EXPECT_EQ(result.exit_code, 2) << c.args << ": " << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(out)) << c.args;
    EXPECT_FALSE(fs::exists(dir.at("100%")));
  }
}

// A stand-in for sbatch: runs the script at once (an array's tasks one after another, with
// SLURM_ARRAY_TASK_ID set and their --output pattern filled in), records its arguments, prints an id.
const char* kFakeSbatch = R"(#!/usr/bin/env bash
set -euo pipefail
printf '%s\n' "$*" >> "$(dirname "$0")/calls.txt"
script="${@: -1}"
output=/dev/null
for arg in "$@"; do case "$arg" in --output=*) output="${arg#--output=}";; esac; done
range=$(sed -n 's/^#SBATCH --array=//p' "$script")
if [ -n "$range" ]; then
  for ((i = ${range%-*}; i <= ${range#*-}; i++)); do SLURM_ARRAY_TASK_ID=$i bash "$script" > "${output//%a/$i}" 2>&1; done
else
  bash "$script" > "$output" 2>&1
fi
echo $((1000 + $(wc -l < "$(dirname "$0")/calls.txt")))
)";

TEST(SlurmCli, TheScriptsRunByAStandInSbatchReproduceTheUnshardedRun) {
  Workdir dir("submit");
  dir.file("c.yaml", kFakeConfig);
  fs::create_directories(dir.path / "bin");
  const std::string sbatch = dir.file("bin/sbatch", kFakeSbatch);
  fs::permissions(sbatch, fs::perms::owner_all);
  const std::string out = dir.at("it's jobs");
  const std::string in_dir = "cd " + quote(dir.path.string()) + " && ";
  ASSERT_EQ(run_shell(in_dir + cli("slurm c.yaml --shards 3 --out " + quote(out))).exit_code, 0);
  // Submitted from elsewhere: the tasks cd to where the scripts were written (the config's home).
  auto submitted = run_shell("cd / && PATH=" + quote((dir.path / "bin").string()) + ":$PATH bash " + quote(out + "/submit.sh"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  EXPECT_NE(submitted.output.find("array_job=1001\nmerge_job=1002\n"), std::string::npos) << submitted.output;
  std::ifstream calls_file(dir.path / "bin" / "calls.txt");
  const std::string calls(std::istreambuf_iterator<char>(calls_file), {});
  EXPECT_NE(calls.find("--dependency=afterok:1001 --output=" + out + "/logs/merge.out"), std::string::npos) << calls;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(fs::exists(out + "/shard-" + std::to_string(i) + ".db")) << i;
  std::ifstream log(out + "/logs/shard-1.out");
  const std::string task_log(std::istreambuf_iterator<char>(log), {});
  EXPECT_NE(task_log.find("shard 1/3: 3 of 10 samples"), std::string::npos) << task_log;

  ASSERT_EQ(run_shell(in_dir + cli("eval -q -c c.yaml --db whole.db")).exit_code, 0);
  EXPECT_EQ(whole_run_rows(out + "/merged.db").size(), 40u);
  EXPECT_EQ(whole_run_rows(out + "/merged.db"), whole_run_rows(dir.at("whole.db")));
}
