// Schema version 4 (issue 12 item 5): databases of every older version migrate with their rows,
// content tables hold one row per content, and the leaderboard keys policies by content: two
// different files of one name are two rows, labelled name@hash-prefix; one content stays one row.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include "core/util/error.h"
#include "evals/leaderboard.h"
#include "evals/leaderboard_stats.h"
#include "evals/policy_labels.h"
#include "evals/results_store.h"
#include "evals/stats_compare.h"
#include "old_schema_db.h"
#include "store_records.h"
#include "temp_db.h"

using namespace kvevict::evals;

namespace {

using test::TempDb;

RunRecord record(const std::string& config_hash) { return test::run_record(config_hash); }

// test::sample_result at budget 25% with the policy's content hash and a prompt hash per sample.
SampleResult row(const std::string& key, const std::string& policy, const std::string& policy_hash, double score) {
  SampleResult r = test::sample_result(key, policy, "25%", score);
  r.policy_hash = policy_hash;
  r.prompt_hash = "p-" + key;
  return r;
}

// One finished run of `policy` with content `hash`: samples k1 and k2 scored `score`.
int64_t finished_run(ResultsStore& store, const std::string& config, const std::string& policy,
                     const std::string& hash, double score) {
  int64_t id = store.create_run(record(config));
  store.insert_results(id, {row("k1", policy, hash, score), row("k2", policy, hash, score)});
  store.update_aggregates(id);
  store.finish_run(id, "finished");
  return id;
}

int64_t count(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, ("SELECT COUNT(*) FROM " + table).c_str(), -1, &stmt, nullptr), SQLITE_OK);
  int64_t n = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return n;
}

const std::string kHashA = "3f2a91c0" + std::string(56, '0');
const std::string kHashB = "7bc01200" + std::string(56, '1');

}  // namespace

class OldSchema : public ::testing::TestWithParam<int> {};

TEST_P(OldSchema, MigratesToTheCurrentVersionWithItsRows) {
  TempDb db("store_old_v" + std::to_string(GetParam()));
  test::write_old_database(db.path, GetParam());
  ResultsStore store(db.path);
  EXPECT_EQ(store.schema_version(), ResultsStore::kSchemaVersion);
  auto run = store.run(1);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->name, "old");
  EXPECT_EQ(run->status, "finished");
  EXPECT_EQ(run->shard, "");
  EXPECT_EQ(run->scoring, "");  // written before version 5: the backend was not recorded
  EXPECT_EQ(run->prefill_attention, "own");  // before version 6 an eval could only run the own kernel
  EXPECT_EQ(run->prefill, "shared");  // before version 7 every run evicted one shared prefill
  auto rows = store.results(1);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].prediction, "the answer");
  EXPECT_EQ(rows[1].score, 50);
  if (GetParam() < 4) {
    EXPECT_EQ(rows[0].policy_hash, "");  // written before version 4: no content recorded
    EXPECT_EQ(rows[0].prompt_hash, "");
  }
  EXPECT_EQ(store.result(rows[0].id)->sample_key, "k1");
  // The old rows still display, under their plain name.
  auto board = store.leaderboard();
  ASSERT_EQ(board.size(), 1u);
  EXPECT_EQ(board[0].policy, "snapkv");
  EXPECT_EQ(board[0].policy_hash, "");
  EXPECT_EQ(board[0].prefill_attention, "own");
  EXPECT_DOUBLE_EQ(board[0].score, 75);
  // The content tables exist and take rows.
  EXPECT_EQ(count(db.path, "policies"), 0);
  EXPECT_EQ(count(db.path, "prompts"), 0);
  store.insert_policies({PolicySource{"snapkv", "snapkv", "name: snapkv\n", "{}", kHashA}});
  EXPECT_EQ(count(db.path, "policies"), 1);
}

INSTANTIATE_TEST_SUITE_P(Versions, OldSchema, ::testing::Values(1, 2, 3, 4, 5, 6, 7));

// A read-only store (replay) is not migrated: a version-4 file still reads, its runs without a
// recorded backend, and the file keeps its version.
TEST(OldSchemaReadOnly, AVersionFourFileReadsWithoutItsScoringColumn) {
  TempDb db("store_old_ro_v4");
  test::write_old_database(db.path, 4);
  {
    ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
    EXPECT_EQ(store.schema_version(), 4);
    ASSERT_EQ(store.runs().size(), 1u);
    EXPECT_EQ(store.runs()[0].scoring, "");
    EXPECT_EQ(store.run(1)->name, "old");
    const auto board = store.leaderboard();
    ASSERT_EQ(board.size(), 1u);
    EXPECT_EQ(board[0].scoring, "");
  }
  EXPECT_EQ(ResultsStore(db.path, ResultsStore::Access::ReadOnly).schema_version(), 4);
}

// A read-only version-5 file (replay) has no prefill_attention column: its runs read as own, the
// only prefill attention an eval could run before version 6, and the file keeps its version.
TEST(OldSchemaReadOnly, AVersionFiveFileReadsItsRunsAsOwnPrefillAttention) {
  TempDb db("store_old_ro_v5");
  test::write_old_database(db.path, 5);
  {
    ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
    EXPECT_EQ(store.schema_version(), 5);
    ASSERT_EQ(store.runs().size(), 1u);
    EXPECT_EQ(store.runs()[0].prefill_attention, "own");
    EXPECT_EQ(store.run(1)->prefill_attention, "own");
    const auto board = store.leaderboard();
    ASSERT_EQ(board.size(), 1u);
    EXPECT_EQ(board[0].prefill_attention, "own");
  }
  EXPECT_EQ(ResultsStore(db.path, ResultsStore::Access::ReadOnly).schema_version(), 5);
}

TEST(ResultsStoreContent, OldRowsBesideNewContentOfTheSameNameAreTwoLabelledRows) {
  TempDb db("store_old_new");
  test::write_old_database(db.path, 3);
  ResultsStore store(db.path);
  finished_run(store, "cfg-new", "snapkv", kHashA, 100);
  auto board = store.leaderboard();
  ASSERT_EQ(board.size(), 2u);
  EXPECT_EQ(board[0].policy, "snapkv@nohash");
  EXPECT_EQ(board[1].policy, "snapkv@3f2a91");
  EXPECT_DOUBLE_EQ(board[1].score, 100);
}

TEST(ResultsStoreContent, ContentRowsAreStoredOncePerHash) {
  TempDb db("store_content_once");
  ResultsStore store(db.path);
  const PolicySource policy{"snapkv", "snapkv", "name: snapkv\nabout: x\n", "{\"window\":32}", kHashA};
  store.insert_policies({policy});
  store.insert_policies({policy, PolicySource{"snapkv", "other-label", "text", "{}", kHashA}});
  EXPECT_EQ(count(db.path, "policies"), 1);
  auto stored = store.policy(kHashA);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->text, policy.text);
  EXPECT_EQ(stored->label, "snapkv");  // the first record of a content stays
  EXPECT_EQ(stored->params_json, policy.params_json);
  EXPECT_FALSE(store.policy(kHashB));

  Sample sample;
  sample.query_aware = true;
  sample.references = {"42"};
  sample.metric = "contains";
  const StoredPrompt prompt = make_stored_prompt(sample, PromptText{"<|im_start|>user\nfind 42", "", ""});
  int64_t run = store.create_run(record("c"));
  store.insert_results(run, {row("k1", "snapkv", kHashA, 1)}, {prompt});
  store.insert_results(run, {row("k2", "snapkv", kHashA, 1)}, {prompt});
  EXPECT_EQ(count(db.path, "prompts"), 1);
  auto back = store.prompt(prompt.hash);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->text, prompt.text);
  EXPECT_EQ(prompt_content_hash(back->text, back->sample_json), prompt.hash);
  EXPECT_EQ(sample_from_stored(*back).references, sample.references);
  EXPECT_EQ(store.run_policy_hashes(run), (std::map<std::string, std::string>{{"snapkv", kHashA}}));
}

TEST(ResultsStoreContent, PromptHashCoversTextAndScoringFields) {
  Sample sample;
  sample.references = {"a"};
  const PromptText text{"context", "question", ""};
  const std::string base = make_stored_prompt(sample, text).hash;
  EXPECT_EQ(make_stored_prompt(sample, text).hash, base);
  EXPECT_NE(make_stored_prompt(sample, PromptText{"context", "question ", ""}).hash, base);
  EXPECT_NE(make_stored_prompt(sample, PromptText{"contextq", "uestion", ""}).hash, base);  // parts are framed
  Sample other = sample;
  other.references = {"b"};
  EXPECT_NE(make_stored_prompt(other, text).hash, base);
  EXPECT_NE(policy_content_hash("a", "{}"), policy_content_hash("a", "{\"w\":1}"));
  EXPECT_NE(policy_content_hash("ab", "{}"), policy_content_hash("a", "b{}"));
}

TEST(ResultsStoreContent, TwoFilesOfOneNameAreTwoRowsAndOneContentStaysOneRow) {
  TempDb db("store_collision");
  ResultsStore store(db.path);
  finished_run(store, "cfg1", "snapkv", kHashA, 20);
  finished_run(store, "cfg2", "snapkv", kHashB, 60);
  finished_run(store, "cfg3", "snapkv", kHashA, 40);  // the first content again: replaces its own row
  finished_run(store, "cfg4", "keep", kHashB, 90);   // one content of its name: no suffix
  auto board = store.leaderboard();
  ASSERT_EQ(board.size(), 3u);
  EXPECT_EQ(board[0].policy, "keep");
  EXPECT_EQ(board[1].policy, "snapkv@3f2a91");
  EXPECT_DOUBLE_EQ(board[1].score, 40);
  EXPECT_EQ(board[1].policy_name, "snapkv");
  EXPECT_EQ(board[2].policy, "snapkv@7bc012");
  EXPECT_DOUBLE_EQ(board[2].score, 60);
  // Labels do not depend on the filter: `compare` takes what any leaderboard printed.
  EXPECT_EQ(store.leaderboard("needle", "m.gg")[1].policy, "snapkv@3f2a91");
  EXPECT_EQ(store.grid_cells()[1].policy, "snapkv@3f2a91");

  // Per-sample scores follow the stored name within each row's run.
  auto groups = build_leaderboard(board, store_sample_scores(store));
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].rows.size(), 3u);
  for (const auto& r : groups[0].rows) EXPECT_EQ(r.cells.at("25%").score.n, 2) << r.policy;
  const std::string table = render_leaderboard(groups, LeaderboardFormat::Table);
  EXPECT_NE(table.find("snapkv@3f2a91"), std::string::npos) << table;
  EXPECT_NE(table.find("snapkv@7bc012"), std::string::npos) << table;
  const std::string json = render_leaderboard(groups, LeaderboardFormat::Json);
  EXPECT_NE(json.find("\"policy_hash\": \"" + kHashA + "\""), std::string::npos) << json;

  // compare: the labelled versions work; the bare shared name is refused, listing them.
  auto comparison = compare_policies(board, store_sample_scores(store), "snapkv@7bc012", "snapkv@3f2a91");
  ASSERT_EQ(comparison.size(), 1u);
  EXPECT_DOUBLE_EQ(comparison[0].difference.mean, 20);
  try {
    compare_policies(board, store_sample_scores(store), "snapkv", "keep");
    ADD_FAILURE() << "compared an ambiguous name";
  } catch (const kvevict::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("give one of snapkv@3f2a91, snapkv@7bc012"), std::string::npos) << e.what();
  }
}

TEST(PolicyLabels, PrefixesGrowUntilTheyDiffer) {
  const std::string a = "abcdef01" + std::string(56, '0'), b = "abcdef02" + std::string(56, '0');
  auto labels = policy_display_labels({{"p", {a, b, ""}}, {"q", {a}}, {"r", {""}}});
  EXPECT_EQ(labels.at({"p", a}), "p@abcdef01");
  EXPECT_EQ(labels.at({"p", b}), "p@abcdef02");
  EXPECT_EQ(labels.at({"p", ""}), "p@nohash");
  EXPECT_EQ(labels.at({"q", a}), "q");
  EXPECT_EQ(labels.at({"r", ""}), "r");
}
