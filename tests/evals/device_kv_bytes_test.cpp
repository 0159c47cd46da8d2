// The device's own KV bytes on the leaderboard (schema version 8, aggregates.device_kv_bytes): the
// mean over a cell's samples of extra_json kv_bytes_on_device + codebook_bytes_on_device, NULL (NaN,
// shown '-' / null / empty) unless every sample measured it; back-filled when a version-7 file
// migrates; shown by --metric device_kv_bytes, the JSON, the CSV and the report.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "evals/leaderboard.h"
#include "evals/leaderboard_pooled.h"
#include "evals/report.h"
#include "evals/results_store.h"
#include "old_schema_db.h"
#include "store_records.h"
#include "temp_db.h"

using namespace kvevict::evals;

namespace {

using test::TempDb;

SampleResult result(const std::string& key, const std::string& policy, const std::string& budget,
                    const std::string& extra_json, const std::string& task = "needle") {
  SampleResult r = test::sample_result(key, policy, budget, 50);
  r.task = task;
  r.kv_bytes_full = 4000;
  r.extra_json = extra_json;
  return r;
}

int64_t finished_run(ResultsStore& store, const std::string& hash, const std::vector<SampleResult>& rows,
                     const std::string& device = "cuda:0") {
  const int64_t id = store.create_run(test::run_record(hash, "m.gguf", device));
  store.insert_results(id, rows);
  store.update_aggregates(id);
  store.finish_run(id, "finished");
  return id;
}

const AggregateRow& cell(const std::vector<AggregateRow>& rows, const std::string& policy, const std::string& budget,
                         const std::string& task = "needle") {
  for (const auto& row : rows)
    if (row.policy == policy && row.budget == budget && row.task == task) return row;
  throw std::runtime_error("no cell " + policy + " " + budget);
}

}  // namespace

TEST(DeviceKvBytes, AnAggregateIsTheMeanOfEntriesAndBooksWhereEverySampleMeasuredIt) {
  TempDb db("device_bytes_mean");
  ResultsStore store(db.path);
  finished_run(store, "h",
               {// dense: entries only; with books: entries + books
                result("k1", "snapkv", "25%", R"({"kv_bytes_on_device": 1000, "codebook_bytes_on_device": 0})"),
                result("k2", "snapkv", "25%", R"({"kv_bytes_on_device": 3000})"),
                result("k1", "spindlekv", "25%", R"({"kv_bytes_on_device": 2000, "codebook_bytes_on_device": 500})"),
                result("k2", "spindlekv", "25%", R"({"kv_bytes_on_device": 2000.5, "codebook_bytes_on_device": 1})"),
                // one sample without the figure: the cell is not measured, never a mean of the rest
                result("k1", "tova", "25%", R"({"kv_bytes_on_device": 1000})"),
                result("k2", "tova", "25%", R"({"evict_ms": 1})"),
                // not numbers, not JSON: not measured, and no error
                result("k1", "h2o", "25%", R"({"kv_bytes_on_device": "1000"})"),
                result("k1", "knorm", "25%", "not json"),
                result("k1", "cake", "25%", R"({"kv_bytes_on_device": null})")});
  const auto rows = store.leaderboard();
  EXPECT_DOUBLE_EQ(cell(rows, "snapkv", "25%").device_kv_bytes, 2000);
  EXPECT_DOUBLE_EQ(cell(rows, "spindlekv", "25%").device_kv_bytes, (2500 + 2001.5) / 2);
  for (const char* policy : {"tova", "h2o", "knorm", "cake"})
    EXPECT_TRUE(std::isnan(cell(rows, policy, "25%").device_kv_bytes)) << policy;
  EXPECT_DOUBLE_EQ(cell(rows, "snapkv", "25%").kv_bytes, 1000);  // the policy's accounting is unchanged
}

TEST(DeviceKvBytes, ACpuRunHasNoneAndEveryOutputSaysSo) {
  TempDb db("device_bytes_outputs");
  ResultsStore store(db.path);
  finished_run(store, "cuda", {result("k1", "snapkv", "25%", R"({"kv_bytes_on_device": 1536})")});
  finished_run(store, "cpu", {result("k1", "snapkv", "25%", R"({"evict_ms": 1})", "qa")}, "cpu");
  const auto rows = store.leaderboard();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(std::isnan(cell(rows, "snapkv", "25%", "qa").device_kv_bytes));

  // Two tasks: the pooled "all tasks" cell too, not measured since the CPU task was not.
  const auto json = nlohmann::json::parse(render_leaderboard(rows, LeaderboardFormat::Json, {}));
  ASSERT_EQ(json.size(), 3u);
  for (const auto& record : json) {
    if (record["task"] == "needle") EXPECT_EQ(record["device_kv_bytes"], 1536);
    else EXPECT_TRUE(record["device_kv_bytes"].is_null());
  }

  std::istringstream csv(render_leaderboard(rows, LeaderboardFormat::Csv, {}));
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header.substr(header.rfind(',') + 1), "device_kv_bytes");
  int lines = 0;
  while (std::getline(csv, line)) {
    ++lines;
    const std::string last = line.substr(line.rfind(',') + 1);
    EXPECT_EQ(last, line.find("needle") != std::string::npos ? "1536" : "") << line;
  }
  EXPECT_EQ(lines, 3);

  LeaderboardOptions options;
  options.metric = *parse_leaderboard_metric("device_kv_bytes");
  const std::string table = render_leaderboard(rows, LeaderboardFormat::Table, options);
  EXPECT_NE(table.find("1.50 KiB"), std::string::npos) << table;
  EXPECT_NE(table.find("device_kv_bytes"), std::string::npos) << table;
  const size_t qa = table.find("qa —");
  ASSERT_NE(qa, std::string::npos) << table;
  EXPECT_EQ(table.find("KiB", qa), std::string::npos) << table;  // the CPU run's cell shows '-'
}

TEST(DeviceKvBytes, PoolingKeepsItOnlyWhereEveryTaskMeasuredIt) {
  std::vector<AggregateRow> rows(3);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].model = "m";
    rows[i].policy = rows[i].policy_name = i < 2 ? "snapkv" : "tova";
    rows[i].budget = "25%";
    rows[i].samples = static_cast<int64_t>(i + 1);
  }
  rows[0].task = "a";
  rows[0].device_kv_bytes = 100;
  rows[1].task = "b";
  rows[1].device_kv_bytes = 400;  // weighted by samples: (1 * 100 + 2 * 400) / 3
  rows[2].task = "a";             // tova: not measured
  rows.push_back(rows[2]);
  rows.back().task = "b";
  rows.back().device_kv_bytes = 50;
  const auto pooled = pooled_rows(rows);
  ASSERT_EQ(pooled.size(), 2u);
  for (const auto& p : pooled) {
    if (p.policy == "snapkv") EXPECT_DOUBLE_EQ(p.device_kv_bytes, 300);
    else EXPECT_TRUE(std::isnan(p.device_kv_bytes)) << p.policy;
  }
}

TEST(DeviceKvBytes, AVersionSevenFileIsBackFilledFromItsResults) {
  TempDb db("device_bytes_v7");
  test::write_old_database(db.path, 7);
  {  // the CUDA rows a version-7 kvevict wrote: the device's bytes in extra_json only
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.path.c_str(), &raw), SQLITE_OK);
    test::exec_sql(raw, "UPDATE results SET extra_json = '{\"kv_bytes_on_device\": 700, \"codebook_bytes_on_device\": "
                        "100}' WHERE sample_key = 'k1'");
    test::exec_sql(raw, "UPDATE results SET extra_json = '{\"kv_bytes_on_device\": 900}' WHERE sample_key = 'k2'");
    sqlite3_close(raw);
  }
  {  // read-only (replay) reads the unmigrated file: not measured
    ResultsStore store(db.path, ResultsStore::Access::ReadOnly);
    EXPECT_EQ(store.schema_version(), 7);
    EXPECT_TRUE(std::isnan(store.leaderboard().at(0).device_kv_bytes));
  }
  ResultsStore store(db.path);
  EXPECT_EQ(store.schema_version(), 8);
  const AggregateRow row = store.leaderboard().at(0);
  EXPECT_DOUBLE_EQ(row.device_kv_bytes, 850);
  EXPECT_DOUBLE_EQ(row.score, 75);  // the old aggregate is kept, only the new column filled
}

TEST(DeviceKvBytes, AnOlderFileWithoutTheFigureMigratesToNotMeasured) {
  TempDb db("device_bytes_v6");
  test::write_old_database(db.path, 6);
  ResultsStore store(db.path);
  EXPECT_EQ(store.schema_version(), ResultsStore::kSchemaVersion);
  EXPECT_TRUE(std::isnan(store.leaderboard().at(0).device_kv_bytes));
}

TEST(DeviceKvBytes, TheReportShowsTheDeviceTableOnlyWhereSomeCellMeasuredIt) {
  for (const bool cuda : {true, false}) {
    TempDb db(cuda ? "device_bytes_report_cuda" : "device_bytes_report_cpu");
    const std::filesystem::path dir = db.path + ".report";
    std::filesystem::remove_all(dir);
    {
      ResultsStore store(db.path);
      finished_run(store, "h",
                   {result("k1", "snapkv", "25%", cuda ? R"({"kv_bytes_on_device": 3072})" : "{}"),
                    result("k1", "snapkv", "full", cuda ? R"({"kv_bytes_on_device": 12288})" : "{}")},
                   cuda ? "cuda:0" : "cpu");
    }
    ResultsStore store(db.path);
    const ReportFiles files = write_report(store, dir.string());
    std::ifstream in(files.index);
    std::stringstream html;
    html << in.rdbuf();
    const bool table = html.str().find("KV cache on the device after eviction") != std::string::npos;
    EXPECT_EQ(table, cuda);
    if (cuda) {
      EXPECT_NE(html.str().find("3.00 KiB"), std::string::npos);
    }
    std::filesystem::remove_all(dir);
  }
}
