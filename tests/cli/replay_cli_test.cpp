// `kvevict replay` as a user runs it on stories260K (issue 12 item 5): eval a small config, then
// every stored result replays to the stored prediction and score (exit 0); an altered stored row
// replays as different (exit 1, the fields named); an unknown id, a database or row from before
// schema version 4 and a changed model file are refused (exit 2) with nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "../core/test_models.h"
#include "../evals/old_schema_db.h"
#include "cli_run.h"
#include "core/util/sha256.h"

using kvevict::test::run_kvevict;

namespace {

struct Workdir {
  std::filesystem::path path;
  explicit Workdir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("kvevict_replay_" + name + std::to_string(getpid()))) {
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

std::string stories_config(const std::string& model) {
  return "name: replay-smoke\nmodel: " + model + "\ntokenizer: " + kvevict::test::stories_tokenizer() +
         "\nseed: 3\nthreads: 1\ntasks:\n"
         "  passkey: {lengths: [128], depths: [50], samples: 1}\n"
         "  kv_retrieval: {lengths: [160], samples: 1, question: query_aware}\n"
         "  fidelity: {lengths: [128], continuation: 16, greedy: 8, samples: 1}\n"
         "policies: [snapkv, random, {policy: nacl, label: nacl-wide, params: {budget_split: code_pre_8eb45a1}}]\n"
         "budgets: [\"25%\", \"24\", full]\n";
}

void sql(const std::string& path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  kvevict::evals::test::exec_sql(db, text);
  sqlite3_close(db);
}

// Database file (and a non-empty WAL) hashed: equal before and after = nothing written.
std::string fingerprint(const std::string& db) {
  std::string all = kvevict::sha256_file(db);
  std::error_code error;
  if (std::filesystem::file_size(db + "-wal", error) > 0 && !error) all += kvevict::sha256_file(db + "-wal");
  return all;
}

// Result ids listed by `replay --list RUN`.
std::vector<int64_t> listed_ids(const std::string& db, int run) {
  auto r = run_kvevict("replay --list " + std::to_string(run) + " --db " + db);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<int64_t> ids;
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    ids.push_back(std::stoll(line.substr(0, line.find('\t'))));
    EXPECT_NE(line.find("\tyes"), std::string::npos) << line;
  }
  return ids;
}

}  // namespace

TEST(ReplayCli, EveryResultOfAStories260KRunReplaysEqual) {
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  Workdir dir("equal");
  const std::string config = dir.file("smoke.yaml", stories_config(kvevict::test::stories_checkpoint()));
  auto eval = run_kvevict("eval -c " + config + " --db " + dir.db() + " -q");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const std::string before = fingerprint(dir.db());
  const auto ids = listed_ids(dir.db(), 1);
  ASSERT_EQ(ids.size(), 3u * 3 * 3);
  for (int64_t id : ids) {
    auto r = run_kvevict("replay " + std::to_string(id) + " --db " + dir.db() + " --json");
    ASSERT_EQ(r.exit_code, 0) << "result #" << id << "\n" << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["equal"].get<bool>());
    EXPECT_EQ(j["stored"]["prediction"], j["replayed"]["prediction"]);
    EXPECT_EQ(j["stored"]["score"], j["replayed"]["score"]);
    if (j["budget"] == "full") {
      EXPECT_TRUE(j["eviction"].is_null());
    } else {
      ASSERT_TRUE(j["eviction"].is_object()) << r.out;
      // The kept sets printed are the ones measured: their share of the prompt's entries is the
      // stored kept ratio (stories260K: 5 layers x 4 KV heads).
      ASSERT_EQ(j["eviction"]["layers"].size(), 5u);
      double kept = 0, total = 0;
      for (const auto& layer : j["eviction"]["layers"]) {
        for (const auto& head : layer["heads"]) {
          kept += static_cast<double>(head["kept"].size());
          total += j["eviction"]["prompt_tokens"].get<double>();
        }
      }
      EXPECT_NEAR(kept / total, j["stored"]["kept_ratio"].get<double>(), 1e-12) << r.out;
    }
  }
  // The text form prints the kept sets the way inspect does, and the verdict.
  auto text = run_kvevict("replay " + std::to_string(ids[0]) + " --db " + dir.db());
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("layer 0 kv_head 0 budget "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("replay equals the stored result"), std::string::npos) << text.out;
  EXPECT_EQ(fingerprint(dir.db()), before);

  // A stored prediction that the stored content does not give: exit 1, the field named.
  sql(dir.db(), "UPDATE results SET prediction = 'not what it said' WHERE id = " + std::to_string(ids[0]));
  auto differs = run_kvevict("replay " + std::to_string(ids[0]) + " --db " + dir.db());
  EXPECT_EQ(differs.exit_code, 1) << differs.out << differs.err;
  EXPECT_NE(differs.out.find("replay differs from the stored result: prediction"), std::string::npos) << differs.out;
}

TEST(ReplayCli, RefusalsExitWith2AndWriteNothing) {
  if (auto reason = kvevict::test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  Workdir dir("refused");
  // The run's own copy of the model, so that the test can change it afterwards.
  const std::string model = (dir.path / "stories260K.bin").string();
  std::filesystem::copy_file(kvevict::test::stories_checkpoint(), model);
  const std::string config = dir.file("smoke.yaml", stories_config(model));
  ASSERT_EQ(run_kvevict("eval -c " + config + " --db " + dir.db() + " -q").exit_code, 0);
  const std::string before = fingerprint(dir.db());

  auto unknown = run_kvevict("replay 4242 --db " + dir.db());
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("result #4242: no such result in the database"), std::string::npos) << unknown.err;
  auto no_id = run_kvevict("replay --db " + dir.db());
  EXPECT_EQ(no_id.exit_code, 2);
  EXPECT_NE(no_id.err.find("replay needs a RESULT_ID"), std::string::npos) << no_id.err;
  for (const std::string& args : {std::string("replay abc"), std::string("replay 1 --list 1"), std::string("replay -3")}) {
    auto bad = run_kvevict(args + " --db " + dir.db());
    EXPECT_EQ(bad.exit_code, 2) << args << "\n" << bad.err;
  }
  auto no_run = run_kvevict("replay --list 99 --db " + dir.db());
  EXPECT_EQ(no_run.exit_code, 2);
  EXPECT_NE(no_run.err.find("run #99: no such run"), std::string::npos) << no_run.err;
  auto no_db = run_kvevict("replay 1 --db " + (dir.path / "absent.db").string());
  EXPECT_EQ(no_db.exit_code, 2);
  EXPECT_NE(no_db.err.find("absent.db: no such results database"), std::string::npos) << no_db.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "absent.db"));

  // One weight changed (a float well past the header): the file still loads, its SHA-256 differs.
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    f.put('\x7f');
  }
  auto changed = run_kvevict("replay 1 --db " + dir.db());
  EXPECT_EQ(changed.exit_code, 2) << changed.out;
  EXPECT_NE(changed.err.find("has changed since run #1"), std::string::npos) << changed.err;
  EXPECT_EQ(fingerprint(dir.db()), before);
}

TEST(ReplayCli, ADatabaseOrRowFromBeforeVersionFourIsRefused) {
  Workdir dir("old");
  kvevict::evals::test::write_old_database(dir.db(), 3);
  const std::string before = fingerprint(dir.db());
  auto old_db = run_kvevict("replay 1 --db " + dir.db());
  EXPECT_EQ(old_db.exit_code, 2);
  EXPECT_NE(old_db.err.find("has schema version 3, from before results stored their prompt"), std::string::npos)
      << old_db.err;
  EXPECT_EQ(fingerprint(dir.db()), before);  // not migrated by a replay
  // Any other command migrates it; its old rows display but still cannot be replayed.
  auto board = run_kvevict("leaderboard --db " + dir.db());
  EXPECT_EQ(board.exit_code, 0) << board.err;
  EXPECT_NE(board.out.find("snapkv"), std::string::npos) << board.out;
  auto old_row = run_kvevict("replay 1 --db " + dir.db());
  EXPECT_EQ(old_row.exit_code, 2);
  EXPECT_NE(old_row.err.find("result #1 was written before results stored their prompt and policy source"),
            std::string::npos)
      << old_row.err;
  auto list = run_kvevict("replay --list 1 --db " + dir.db());
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("no (before schema 4)"), std::string::npos) << list.out;
}
