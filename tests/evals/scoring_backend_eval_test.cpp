// An eval's scoring backend is chosen once per run and recorded: the same sweep scored by the
// interpreter and by the host-compiled generated kernels gives the same results, each run names
// its backend, a finished run of one backend is not taken for a run of another, and `scoring: cuda`
// without a CUDA decoder is refused before anything runs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/runner.h"
#include "evals/sample_runner.h"
#include "../core/gpu_test_skip.h"
#include "../core/test_models.h"

using namespace kvevict;
using namespace kvevict::evals;

namespace {

std::string config_text(const std::string& scoring, const std::string& device = "cpu") {
  return "name: scoring\n"
         "model: " + test::stories_checkpoint() + "\n"
         "tokenizer: " + test::stories_tokenizer() + "\n"
         "device: " + device + "\n"
         "scoring: " + scoring + "\n"
         "seed: 3\n"
         "threads: 1\n"
         "tasks:\n"
         "  passkey: {lengths: [160], depths: [50], samples: 2}\n"
         "policies: [snapkv, h2o]\n"  // a prefill-only and a decode-time policy
         "budgets: [\"30%\"]\n";
}

struct TempDb {
  std::filesystem::path path;
  explicit TempDb(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + std::to_string(getpid()) + ".db")) {
    std::filesystem::remove(path);
  }
  ~TempDb() { std::filesystem::remove(path); }
};

}  // namespace

TEST(ScoringBackendEval, HostKernelsAndTheInterpreterGiveTheSameResultsAndEachRunNamesItsBackend) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  TempDb db("scoring_backend");
  std::vector<SampleResult> rows[2];
  const char* backends[] = {"interpreter", "host"};
  ResultsStore store(db.path.string());
  for (int b = 0; b < 2; ++b) {
    const EvalConfig config = parse_eval_config(config_text(backends[b]), "scoring.yaml");
    auto runner = make_sample_runner(config);
    EXPECT_EQ(runner->scoring(), backends[b]);
    const EvalSummary summary = run_eval(config, *runner, store, {});
    // The second config differs only in `scoring`, so it is another config: never skipped as done.
    EXPECT_FALSE(summary.skipped);
    const auto run = store.run(summary.run_id);
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->scoring, backends[b]);
    rows[b] = store.results(summary.run_id);
  }
  ASSERT_EQ(rows[0].size(), 4u);  // 2 samples x 2 policies x 1 budget
  ASSERT_EQ(rows[1].size(), rows[0].size());
  for (size_t i = 0; i < rows[0].size(); ++i) {
    EXPECT_EQ(rows[1][i].policy, rows[0][i].policy);
    EXPECT_EQ(rows[1][i].sample_key, rows[0][i].sample_key);
    EXPECT_EQ(rows[1][i].prediction, rows[0][i].prediction) << rows[0][i].policy;
    EXPECT_EQ(rows[1][i].kept_ratio, rows[0][i].kept_ratio) << rows[0][i].policy;
    EXPECT_EQ(rows[1][i].kv_bytes, rows[0][i].kv_bytes) << rows[0][i].policy;
    // No device cache on the CPU: no device bytes recorded.
    EXPECT_FALSE(nlohmann::json::parse(rows[0][i].extra_json).contains("kv_bytes_on_device")) << rows[0][i].extra_json;
  }
  for (const AggregateRow& row : store.leaderboard()) {
    EXPECT_TRUE(row.scoring == "interpreter" || row.scoring == "host");
    EXPECT_TRUE(std::isnan(row.device_kv_bytes)) << row.policy;  // nothing measured on the CPU
  }
}

TEST(ScoringBackendEval, AResumedRunKeepsOneBackend) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  TempDb db("scoring_resume");
  ResultsStore store(db.path.string());
  // Without `scoring:` the config hash is the same whatever auto resolves to; a run started by one
  // backend must not be resumed by another.
  std::string text = config_text("auto");
  text.erase(text.find("scoring: auto\n"), std::string("scoring: auto\n").size());
  const EvalConfig config = parse_eval_config(text, "scoring.yaml");
  RunRecord unfinished;
  unfinished.name = config.name;
  unfinished.config_hash = config.hash;
  unfinished.config_yaml = config.resolved_yaml;
  unfinished.model = config.model;
  auto runner = make_sample_runner(config);
  unfinished.model_hash = runner->model_hash();
  unfinished.device = "cpu";
  unfinished.scoring = "host";
  const int64_t old_id = store.create_run(unfinished);
  store.finish_run(old_id, "failed", "interrupted");
  std::vector<std::string> notes;
  EvalOptions options;
  options.resume = true;
  options.note = [&](const std::string& n) { notes.push_back(n); };
  const EvalSummary summary = run_eval(config, *runner, store, options);
  EXPECT_FALSE(summary.resumed);
  EXPECT_NE(summary.run_id, old_id);
  EXPECT_EQ(store.run(summary.run_id)->scoring, "interpreter");
  bool said = false;
  for (const auto& n : notes) said = said || n.find("was scored by host, this one scores by interpreter") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(ScoringBackendEval, CudaScoringWithoutACudaDecoderIsRefusedBeforeAnythingRuns) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const EvalConfig config = parse_eval_config(config_text("cuda"), "scoring.yaml");
  try {
    make_sample_runner(config);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("scoring cuda scores on the GPU the decoder runs on, but the decoder runs on the cpu"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_eval_config(config_text("gpu"), "scoring.yaml"), UsageError);
}

// The eval pipeline on the GPU (GPU only): `device: cuda` with `scoring: auto` scores with the NVRTC
// kernels, the run and every leaderboard row record it, and each (sample, policy) keeps the cache
// sizes of the CPU interpreter's run (snapkv's and h2o's budgets do not depend on scores). The
// predictions may differ where greedy decoding meets a near tie: counted and printed.
TEST(ScoringBackendEval, CudaEvalScoresOnTheDeviceAndKeepsTheCpusCacheSizes) {
  SKIP_WITHOUT_GPU();
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  TempDb db("scoring_cuda");
  ResultsStore store(db.path.string());
  std::vector<SampleResult> rows[2];
  const std::pair<const char*, const char*> sides[] = {{"interpreter", "cpu"}, {"auto", "cuda"}};
  for (int s = 0; s < 2; ++s) {
    const EvalConfig config = parse_eval_config(config_text(sides[s].first, sides[s].second), "scoring.yaml");
    auto runner = make_sample_runner(config);
    const EvalSummary summary = run_eval(config, *runner, store, {});
    const auto run = store.run(summary.run_id);
    ASSERT_TRUE(run.has_value());
    if (s == 1) {
      EXPECT_EQ(runner->scoring(), "cuda");
      EXPECT_EQ(run->scoring, "cuda");
      EXPECT_EQ(run->device.rfind("cuda", 0), 0u) << run->device;
    }
    rows[s] = store.results(summary.run_id);
  }
  ASSERT_EQ(rows[0].size(), 4u);
  ASSERT_EQ(rows[1].size(), rows[0].size());
  int same_prediction = 0;
  for (size_t i = 0; i < rows[0].size(); ++i) {
    EXPECT_EQ(rows[1][i].sample_key, rows[0][i].sample_key);
    EXPECT_EQ(rows[1][i].kv_bytes, rows[0][i].kv_bytes) << rows[0][i].policy;
    EXPECT_EQ(rows[1][i].kept_ratio, rows[0][i].kept_ratio) << rows[0][i].policy;
    // A dense cache: the device holds what the accounting says, right after the eviction.
    const nlohmann::json extra = nlohmann::json::parse(rows[1][i].extra_json);
    ASSERT_TRUE(extra.contains("kv_bytes_on_device")) << rows[1][i].extra_json;
    EXPECT_EQ(extra["kv_bytes_on_device"].get<int64_t>(), rows[1][i].kv_bytes) << rows[0][i].policy;
    same_prediction += rows[1][i].prediction == rows[0][i].prediction;
  }
  std::printf("eval on cuda: %d of %zu predictions equal the CPU's\n", same_prediction, rows[0].size());
  bool cuda_row = false;
  for (const AggregateRow& row : store.leaderboard()) {
    cuda_row = cuda_row || row.scoring == "cuda";
    // The leaderboard's device bytes: the CUDA run's mean (a dense cache: its kv_bytes), none on the CPU.
    if (row.scoring == "cuda") EXPECT_DOUBLE_EQ(row.device_kv_bytes, row.kv_bytes) << row.policy;
    else EXPECT_TRUE(std::isnan(row.device_kv_bytes)) << row.policy;
  }
  EXPECT_TRUE(cuda_row);
}
